// toolward console: the approvals page asks for the held calls again every
// `data-interval-ms` and puts the new list in place when the calls changed. The list is
// HTML the server rendered and escaped; nothing here builds markup from data.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var box = document.getElementById("held");
  if (!box) {
    return;
  }
  var url = box.getAttribute("data-poll");
  var every = parseInt(box.getAttribute("data-interval-ms"), 10) || 1000;
  function calls() {
    var list = document.getElementById("held-list");
    return list ? list.getAttribute("data-calls") : null;
  }
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) {
          window.location.assign("/login");
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("held-list");
        var list = document.getElementById("held-list");
        if (next && list && next.getAttribute("data-calls") !== calls()) {
          list.replaceWith(document.importNode(next, true));
        }
      })
      .catch(function () {})
      .then(function () {
        window.setTimeout(poll, every);
      });
  }
  window.setTimeout(poll, every);
});
