// toolward console: every signed-in page is asked for with the session's key, which only
// this origin's storage holds (a browser sends the cookie to every port of the host, so the
// cookie alone opens nothing). The page the sign-in answers with hands the key over; a page
// opened by its address comes as an empty shell that this script fills by asking again with
// the key; forms that change something are sent with it; the approvals page asks for the
// held calls again every `data-interval-ms`. What is shown is HTML the server rendered and
// escaped; nothing here builds markup from data.
"use strict";
(function () {
  var STORE = "toolward-console-key";
  // An OpenID Connect sign-in's flow, from the provider button's answer until the provider
  // sends the browser back: kept here, not in a cookie, because another port of this host
  // can read and set the host's cookies but not this origin's storage.
  var FLOW_STORE = "toolward-console-oidc-flow";
  var KEY_HEADER = "X-Toolward-Key";
  var SHOWN_HEADER = "X-Toolward-Shown";
  // Each page shown starts one poll; a poll of an earlier page stops.
  var generation = 0;

  function key() {
    try {
      return window.localStorage.getItem(STORE);
    } catch (e) {
      return null;
    }
  }

  function keep(value, name) {
    try {
      if (value === null) {
        window.localStorage.removeItem(name || STORE);
      } else {
        window.localStorage.setItem(name || STORE, value);
      }
    } catch (e) {}
  }

  function stored(name) {
    try {
      return window.localStorage.getItem(name);
    } catch (e) {
      return null;
    }
  }

  // A POST of the signing-in pages (no session's key yet); the answer is shown whatever its
  // status: a sign-in refused is a page saying why.
  function postSignIn(url, body, shownAt) {
    fetch(url, {
      method: "POST",
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: body,
    })
      .then(function (response) {
        return response.text().then(function (html) {
          show(html, shownAt);
        });
      })
      .catch(function () {
        document.body.textContent = "The console cannot be reached.";
      });
  }

  // The provider sent the browser back: its answer (the query) goes to the console with the
  // flow this origin kept, once; the code leaves the address bar and the history.
  function finishSignIn(box) {
    var query = window.location.search.replace(/^\?/, "");
    var flow = stored(FLOW_STORE) || "";
    keep(null, FLOW_STORE);
    window.history.replaceState(null, "", box.getAttribute("data-clean"));
    var body = new URLSearchParams();
    body.set("query", query);
    body.set("flow", flow);
    postSignIn(box.getAttribute("data-finish"), body, "/login");
  }

  function toLogin() {
    window.location.assign("/login");
  }

  function headers(extra) {
    var h = extra || {};
    h[KEY_HEADER] = key();
    return h;
  }

  // Puts a page the server rendered in place of this one.
  function show(html, url) {
    var next = new DOMParser().parseFromString(html, "text/html");
    document.title = next.title;
    document.body.replaceWith(document.importNode(next.body, true));
    if (url && url !== window.location.href) {
      window.history.replaceState(null, "", url);
    }
    started();
  }

  // Asks for a page with the key and shows it.
  function load(url, init) {
    if (!key()) {
      toLogin();
      return;
    }
    init = init || {};
    init.credentials = "same-origin";
    init.cache = "no-store";
    init.headers = headers(init.headers);
    fetch(url, init)
      .then(function (response) {
        if (response.status === 401) {
          keep(null);
          toLogin();
          return null;
        }
        return response.text().then(function (html) {
          if (response.headers.get("content-type").indexOf("text/html") === 0) {
            show(html, response.url);
          } else {
            document.body.textContent = html;
          }
        });
      })
      .catch(function () {
        document.body.textContent = "The console cannot be reached.";
      });
  }

  // Where each call was in the list: its index by call id.
  function places(list) {
    var at = {};
    var shown = list.querySelectorAll("article.held");
    for (var i = 0; i < shown.length; i += 1) {
      at[shown[i].getAttribute("data-call")] = i;
    }
    return at;
  }

  // The answer buttons of a call that is new or moved take no click for SETTLE_MS: a call
  // that leaves the list moves the next one's buttons under a pointer aimed at its own, and
  // a click meant for one would answer another (an outside attack timed it so). Only those:
  // a client that holds and cancels calls without end (a second attack) pauses its own
  // calls' buttons, not those of a call that stays where it was.
  var SETTLE_MS = 1000;
  function settle(list, before) {
    var paused = [];
    var shown = list.querySelectorAll("article.held");
    for (var i = 0; i < shown.length; i += 1) {
      if (before[shown[i].getAttribute("data-call")] !== i) {
        var buttons = shown[i].querySelectorAll("form.answer button");
        for (var b = 0; b < buttons.length; b += 1) {
          buttons[b].disabled = true;
          paused.push(buttons[b]);
        }
      }
    }
    window.setTimeout(function () {
      for (var j = 0; j < paused.length; j += 1) {
        paused[j].disabled = false;
      }
    }, SETTLE_MS);
  }

  function poll(box, mine) {
    var url = box.getAttribute("data-poll");
    var every = parseInt(box.getAttribute("data-interval-ms"), 10) || 1000;
    function once() {
      if (mine !== generation) {
        return;
      }
      var list = document.getElementById("held-list");
      var extra = {};
      extra[SHOWN_HEADER] = list ? list.getAttribute("data-calls") : "";
      fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers(extra) })
        .then(function (response) {
          if (response.status === 401) {
            keep(null);
            toLogin();
            return null;
          }
          return response.status === 200 ? response.text() : null;
        })
        .then(function (html) {
          if (html === null || mine !== generation) {
            return;
          }
          var next = new DOMParser().parseFromString(html, "text/html").getElementById("held-list");
          var list = document.getElementById("held-list");
          if (next && list) {
            var shown = document.importNode(next, true);
            settle(shown, places(list));
            list.replaceWith(shown);
          }
        })
        .catch(function () {})
        .then(function () {
          window.setTimeout(once, every);
        });
    }
    window.setTimeout(once, every);
  }

  // What a page needs once it is shown.
  function started() {
    generation += 1;
    var handed = document.getElementById("signed-in");
    if (handed) {
      keep(handed.getAttribute("data-key"));
      window.location.replace(handed.getAttribute("data-next"));
      return;
    }
    var going = document.getElementById("oidc-start");
    if (going) {
      keep(going.getAttribute("data-flow"), FLOW_STORE);
      window.location.assign(going.getAttribute("data-next"));
      return;
    }
    var back = document.getElementById("oidc-callback");
    if (back) {
      finishSignIn(back);
      return;
    }
    if (document.getElementById("shell")) {
      load(window.location.href);
      return;
    }
    var box = document.getElementById("held");
    if (box) {
      poll(box, generation);
    }
  }

  // A change (every POST but the sign-in) goes with the key.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.method.toLowerCase() !== "post" || form.getAttribute("action") === "/login") {
      return;
    }
    event.preventDefault();
    if (form.classList.contains("oidc")) {
      postSignIn(form.action, new URLSearchParams(new FormData(form)), "/login");
      return;
    }
    var body = new URLSearchParams(new FormData(form, event.submitter));
    var signingOut = form.getAttribute("action") === "/logout";
    load(form.action, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: body,
    });
    if (signingOut) {
      keep(null);
    }
  });

  document.addEventListener("DOMContentLoaded", started);
})();
