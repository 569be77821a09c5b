"""The web console in a real browser: Debian's Chromium (`/usr/bin/chromium`, headless,
`--no-sandbox` as CI runs as root) driven by Selenium through Debian's `chromedriver`
(both installed by tests/real-servers/install.sh; Selenium is pinned there and downloads
nothing). On a temp copy of examples/mcp with a named token:

1. `toolward console` starts; the browser signs in with the token;
2. a real MCP client (tests/clients/console_client.py, the Python `mcp` library) calls
   `fs__write_file`, which the policy holds: the call shows on the open approvals page
   without a reload; the browser approves it and the client's call completes (the file is
   written);
3. a second held call: a page of another origin posts an approval to the console with the
   user's cookies (cross-site request forgery), which is refused and approves nothing; that
   page's server, on another port of 127.0.0.1, receives the console's session cookie (a
   browser sends a host's cookies to every port) and uses it, which shows nothing of the
   session and answers nothing; the browser then denies the call with a reason, which the
   client receives;
4. the audit page shows the answers and the chain intact;
5. the pin of `fs/create_directory` is changed, as if the server's description changed since
   it: a running `toolward serve` refuses the tool and publishes it; the tools page shows the
   refusal and its diff, and Accept re-pins the tool as `toolward pin --tool` does (the
   manifest holds the server's description again) and says the gateway must restart;
6. the console's pages ran no inline script and no framing is allowed;
7. with `oidc-provider` installed (tests/real-servers/oidc/provider.mjs; required under CI),
   the user signs out and signs in again with the identity provider's button: the browser
   goes to the provider and back, and the page shows the ID token's email and groups, with
   the code gone from the address bar and the flow gone from the origin's storage.

Run with the venv install.sh makes for it:

    tests/real-servers/.installed/browser-venv/bin/python tests/clients/test_console_browser.py

Closes with `console-browser: N passed, N failed (S s)`; exit 1 when anything failed.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import INSTALLED, TOOLWARD, Report, example_copy  # noqa: E402

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = os.environ.get("TOOLWARD_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TOOLWARD_CHROMEDRIVER", "/usr/bin/chromedriver")
TOKEN = "operator-token-" + os.urandom(16).hex()
CLIENT = Path(__file__).resolve().parent / "console_client.py"


def start_console(ex) -> tuple[subprocess.Popen, str]:
    console = subprocess.Popen(
        [str(TOOLWARD), "console", "--config", str(ex.config), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    assert console.stderr is not None
    while time.monotonic() < deadline:
        line = console.stderr.readline()
        found = re.search(r"toolward console at (http://\S+)/", line)
        if found:
            threading.Thread(target=console.stderr.read, daemon=True).start()
            return console, found.group(1)
        if not line and console.poll() is not None:
            break
    console.kill()
    sys.exit("toolward console did not start")


def start_provider(ex) -> tuple[subprocess.Popen, str] | None:
    """tests/real-servers/oidc/provider.mjs on a free port, signing in `alice` by default;
    None when `oidc-provider` is not installed (outside CI)."""
    modules = INSTALLED / "oidc-provider" / "node_modules"
    if not (modules / "oidc-provider" / "package.json").is_file():
        if os.environ.get("CI"):
            sys.exit(f"{modules} is missing and CI must run the OpenID Connect sign-in: run tests/real-servers/install.sh")
        print(f"skipped the OpenID Connect sign-in: {modules} is not installed", flush=True)
        return None
    folder = ex.folder / "provider"
    folder.mkdir()
    (folder / "provider.mjs").write_text(
        (Path(__file__).resolve().parents[1] / "real-servers" / "oidc" / "provider.mjs").read_text())
    (folder / "node_modules").symlink_to(modules)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = subprocess.Popen(
        ["node", str(folder / "provider.mjs")],
        env={**os.environ, "PORT": str(port), "DEFAULT_LOGIN": "alice",
             "KEYS": str(folder / "keys.json")},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert provider.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = provider.stdout.readline()
        if line.startswith("listening "):
            threading.Thread(target=provider.stdout.read, daemon=True).start()
            return provider, line.split()[1]
        if not line and provider.poll() is not None:
            break
    provider.kill()
    sys.exit("the OpenID provider did not start")


def client_call(ex, arguments: dict) -> subprocess.Popen:
    """A real client's call of `fs__write_file`, in a process of its own."""
    return subprocess.Popen(
        [
            str(INSTALLED / "venv" / "bin" / "python"),
            str(CLIENT),
            str(ex.config),
            "fs__write_file",
            json.dumps(arguments),
            str(TOOLWARD),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def client_result(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=60)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"is_error": True, "text": f"no result (exit {process.returncode}): {out!r}"}


class Attacker(http.server.BaseHTTPRequestHandler):
    """Another origin's page: a form that posts an approval to the console on load."""

    target = ""
    call_id = ""
    cookies: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        Attacker.cookies.append(self.headers.get("Cookie") or "")
        page = f"""<!doctype html><html><body>
<form id="f" method="post" action="{self.target}/approvals/answer">
<input name="call" value="{self.call_id}"><input name="verdict" value="approve">
<input name="csrf" value="guessed"></form>
<script>document.getElementById("f").submit();</script></body></html>"""
        body = page.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


def fetch(url: str, cookie: str, origin: str, body: str | None = None) -> tuple[int, str]:
    """What a program holding a stolen cookie gets: it sets any header a browser would."""
    request = urllib.request.Request(url, data=body.encode() if body is not None else None,
                                     method="POST" if body is not None else "GET")
    request.add_header("Cookie", cookie)
    request.add_header("Origin", origin)
    if body is not None:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def held_article(driver, known: set[str], timeout: float):
    """The first held call on the page not in `known`, waiting for it without a reload."""

    def found(d):
        for article in d.find_elements(By.CSS_SELECTOR, "article.held"):
            call = article.get_attribute("data-call")
            if call not in known:
                return article
        return False

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(found)


def accept_changed_tool(report: Report, driver, ex, url: str) -> None:
    """Step 5: the tools page shows a gateway's refusal with its diff; Accept re-pins it."""
    manifest_path = ex.folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    pinned = manifest["servers"]["fs"]["tools"]["create_directory"]
    listed = pinned["description"]
    pinned["description"] = "An older description <b>pinned</b> before the server changed it."
    pinned["description_sha256"] = hashlib.sha256(pinned["description"].encode()).hexdigest()
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    gateway = subprocess.Popen(ex.serve_argv(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list((ex.state / "gateways").glob("*.json")):
            time.sleep(0.1)
        driver.get(url + "/tools")
        refused = WebDriverWait(driver, 10).until(EC.presence_of_element_located(
            (By.CSS_SELECTOR, "section.gateway:not(.gone) div.refused-tool[data-tool='create_directory']")))
        diff = refused.find_element(By.CSS_SELECTOR, "pre.diff").text
        report.check("the tools page shows the running gateway's refusal of the changed tool "
                     "with its diff, the server's words as text",
                     "changed since the pin" in refused.text
                     and "-An older description <b>pinned</b>" in diff
                     and "+" + listed[:40] in diff, diff[:500])
        refused.find_element(By.CSS_SELECTOR, "button.accept").click()
        flash = WebDriverWait(driver, 60).until(
            EC.presence_of_element_located((By.ID, "flash"))).text
        repinned = json.loads(manifest_path.read_text())["servers"]["fs"]["tools"]["create_directory"]
        report.check("Accept re-pins the tool from what the server lists, as `pin --tool` does, "
                     "and says the gateway must restart",
                     "accepted the change of tool `fs/create_directory`" in flash
                     and "restart" in flash and repinned["description"] == listed, flash)
    finally:
        if gateway.stdin is not None:
            gateway.stdin.close()
        try:
            gateway.wait(timeout=10)
        except subprocess.TimeoutExpired:
            gateway.kill()
    report.check("a gateway that ended cleanly removed its published state",
                 not list((ex.state / "gateways").glob("*.json")))


def scenario(report: Report) -> None:
    ex = example_copy("toolward-console-browser-")
    config = json.loads(ex.config.read_text())
    config["listen"] = {"tokens": {"operator": TOKEN}}
    config.setdefault("limits", {})["approval_timeout_ms"] = 60000
    provider = start_provider(ex)
    if provider is not None:
        config["console"] = {"oidc": {
            "issuer": provider[1], "client_id": "toolward-console",
            "client_secret": "${TOOLWARD_TEST_CONSOLE_SECRET}", "user_claim": "email",
            "scopes": ["openid", "email", "groups"]}}
        os.environ["TOOLWARD_TEST_CONSOLE_SECRET"] = "secret-toolward-console"
    ex.config.write_text(json.dumps(config, indent=2) + "\n")
    console, url = start_console(ex)
    driver = None
    attacker = None
    try:
        driver = browser()
        driver.get(url + "/approvals")
        report.check("without a session the console sends the browser to sign in",
                     driver.current_url.endswith("/login"), driver.current_url)
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "sign-in").click()
        try:
            WebDriverWait(driver, 10).until(EC.url_contains("/approvals"))
        except Exception:
            report.check("sign-in leads to the approvals page", False,
                         driver.find_element(By.TAG_NAME, "body").text[:500])
            raise
        # The page arrives as a shell its script fills, asking again with the session's key.
        user = WebDriverWait(driver, 10).until(
            EC.presence_of_element_located((By.ID, "user"))).text
        report.check("sign-in with the named token: the user is the token's name",
                     user == "operator", f"user {user!r}")
        cookies = {c["name"]: c for c in driver.get_cookies()}
        session = cookies.get("toolward_console", {})
        report.check("the session cookie is HttpOnly and SameSite=Strict",
                     session.get("httpOnly") is True and session.get("sameSite") == "Strict",
                     str(session))

        # 1. Approve: a real client's call shows without a reload and completes.
        first_args = {"path": str(ex.sandbox / "approved.txt"), "content": "written after the console approved\n"}
        driver.execute_script("window.__notReloaded = true;")
        started = time.monotonic()
        first = client_call(ex, first_args)
        article = held_article(driver, set(), 30)
        seen_after = time.monotonic() - started
        first_id = article.get_attribute("data-call")
        reloaded = driver.execute_script("return window.__notReloaded !== true;")
        print(f"  (the held call showed {seen_after:.1f} s after the client started, "
              "toolward serve's start included)", flush=True)
        report.check("a held call of a real client shows on the open page without a reload",
                     not reloaded and first_id is not None, f"after {seen_after:.1f} s")
        if os.environ.get("TOOLWARD_CONSOLE_SCREENSHOT"):
            # The picture in docs/console.md: TOOLWARD_CONSOLE_SCREENSHOT=docs/console.png.
            driver.set_window_size(900, 1100)
            driver.save_screenshot(os.environ["TOOLWARD_CONSOLE_SCREENSHOT"])
        arguments = article.find_element(By.CSS_SELECTOR, "pre.arguments").text
        report.check("its arguments are shown as `toolward approvals list` shows them",
                     "approved.txt" in arguments and "content:" in arguments, arguments)
        approve = article.find_element(By.CSS_SELECTOR, "button.approve")
        report.check("a list that just changed takes no click at once (no click lands on a "
                     "call that moved under the pointer)", not approve.is_enabled())
        WebDriverWait(driver, 5, poll_frequency=0.05).until(lambda d: approve.is_enabled())
        approve.click()
        WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "flash")))
        flash = driver.find_element(By.ID, "flash").text
        report.check("the console says the call was approved by the signed-in user",
                     "approved call" in flash and "console: `operator`" in flash, flash)
        result = client_result(first)
        written = (ex.sandbox / "approved.txt").exists()
        report.check("the client's call completes and the file is written",
                     not result["is_error"] and written, str(result))

        # 2. A cross-site POST with the user's cookies approves nothing.
        second = client_call(ex, {"path": str(ex.sandbox / "denied.txt"), "content": "never\n"})
        article = held_article(driver, {first_id}, 30)
        second_id = article.get_attribute("data-call")
        Attacker.target = url
        Attacker.call_id = second_id
        attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
        threading.Thread(target=attacker.serve_forever, daemon=True).start()
        driver.get(f"http://127.0.0.1:{attacker.server_address[1]}/")
        time.sleep(1.0)
        refused = driver.find_element(By.TAG_NAME, "body").text
        report.check("a page of another origin posting an approval is refused (403, by its Origin)",
                     "is not this console's" in refused, refused[:300])
        report.check("the forged approval approved nothing: the call still waits",
                     second.poll() is None and not (ex.sandbox / "denied.txt").exists())
        stolen = next((c for c in Attacker.cookies if "toolward_console=" in c), "")
        report.check("the browser sent the console's cookie to the other port (why a cookie "
                     "alone must not be a session)", bool(stolen), str(Attacker.cookies))
        if stolen:
            for path, expected in (("/approvals", 200), ("/audit", 200), ("/approvals/list", 401)):
                status, body = fetch(url + path, stolen, url)
                report.check(f"the stolen cookie alone: GET {path} is {expected} and shows "
                             "no call and no user",
                             status == expected and second_id not in body and "operator" not in body,
                             f"{status} {body[:200]}")
            status, body = fetch(url + "/approvals/answer", stolen, url,
                                 f"call={second_id}&verdict=approve")
            report.check("the stolen cookie alone approves nothing (403): the call still waits",
                         status == 403 and second.poll() is None
                         and not (ex.sandbox / "denied.txt").exists(), f"{status} {body[:200]}")

        # 3. Deny with a reason.
        driver.get(url + "/approvals")
        article = held_article(driver, {first_id}, 10)
        article.find_element(By.NAME, "reason").send_keys("not from the console's test")
        article.find_element(By.CSS_SELECTOR, "button.deny").click()
        WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "flash")))
        result = client_result(second)
        report.check("the denied call reaches the client as an error with the reason",
                     result["is_error"] and "not from the console's test" in result["text"],
                     str(result))
        report.check("the denied call was never made", not (ex.sandbox / "denied.txt").exists())

        # 4. The audit page shows the answers, and the chain intact.
        driver.get(url + "/audit?decision=hold")
        chain = WebDriverWait(driver, 10).until(
            EC.presence_of_element_located((By.ID, "chain-state"))).text
        report.check("the audit page shows the chain intact", chain.startswith("intact"), chain)
        records = driver.find_element(By.ID, "records").text
        report.check("the audit page lists the held calls",
                     first_id in records and second_id in records, records[:500])
        # 5. A changed tool, refused by a running gateway, accepted from its diff.
        accept_changed_tool(report, driver, ex, url)

        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"
                  and "Content Security Policy" in e.get("message", "")]
        report.check("no page of the console broke its own Content-Security-Policy",
                     not errors, str(errors))

        # 7. Sign out, and in again with the identity provider.
        if provider is not None:
            driver.get(url + "/approvals")
            WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "user")))
            driver.find_element(By.CSS_SELECTOR, "form.signout button").click()
            WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "sign-in-oidc")))
            driver.find_element(By.ID, "sign-in-oidc").click()
            try:
                user = WebDriverWait(driver, 20).until(
                    lambda d: "/approvals" in d.current_url
                    and d.find_elements(By.ID, "user")
                    and d.find_element(By.ID, "user").text)
            except Exception:
                report.check("the identity provider's button signs in", False,
                             driver.current_url + " " + driver.find_element(By.TAG_NAME, "body").text[:500])
                raise
            report.check("the provider's sign-in: the user is the ID token's email",
                         user == "alice@example.test", f"user {user!r}")
            groups = driver.find_element(By.ID, "groups").text
            report.check("the provider's sign-in: the page shows the user's groups",
                         "platform" in groups, groups)
            history = driver.execute_script("return window.location.href")
            flow = driver.execute_script(
                "return window.localStorage.getItem('toolward-console-oidc-flow')")
            report.check("the code left the address bar and the flow the origin's storage",
                         "code=" not in history and flow is None, f"{history} {flow!r}")
            errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"
                      and "Content Security Policy" in e.get("message", "")]
            report.check("the provider's sign-in broke no Content-Security-Policy of the console",
                         not errors, str(errors))
    finally:
        if provider is not None:
            provider[0].kill()
        if driver is not None:
            driver.quit()
        if attacker is not None:
            attacker.shutdown()
        console.terminate()
        try:
            console.wait(timeout=10)
        except subprocess.TimeoutExpired:
            console.kill()
        ex.cleanup()


def main() -> int:
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            sys.exit(f"{path} is missing: install Debian's {what} (tests/real-servers/install.sh does)")
    started = time.monotonic()
    report = Report("console-browser")
    scenario(report)
    code = report.close()
    print(f"console-browser: {time.monotonic() - started:.1f} s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
