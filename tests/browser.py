"""A headless Chromium driven over the DevTools protocol (websocket-client), for tests that look at
pages as a person would. Loopback only; the browser runs with a fresh, empty profile and is ended
by its pid."""
import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import websocket

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--window-size=1500,1100", "--remote-debugging-address=127.0.0.1"]

# Text of the whole page, including the shadow roots of TensorBoard's Polymer components.
DEEP_TEXT = """(function(){function walk(n,out){if(n.shadowRoot)walk(n.shadowRoot,out);
for(const c of n.childNodes){if(c.nodeType===3)out.push(c.textContent);else walk(c,out);}return out;}
return walk(document.documentElement,[]).join(' ');})()"""
# Elements with a tag name, including inside shadow roots: [{tag, src, width, height}]
DEEP_ELEMENTS = """(function(tags){const out=[];function walk(n){if(n.shadowRoot)walk(n.shadowRoot);
for(const c of n.children||[]){if(tags.includes(c.tagName.toLowerCase())){const r=c.getBoundingClientRect();
out.push({tag:c.tagName.toLowerCase(),src:c.src||'',width:r.width,height:r.height});}walk(c);}}
walk(document.documentElement);return out;})(%s)"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, what: str) -> bytes:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read()
        except OSError as e:
            last = e
            time.sleep(0.3)
    raise TimeoutError("%s did not answer at %s within %.0f s: %s" % (what, url, timeout_s, last))


class Chromium:
    def __init__(self, binary: str = "chromium", timeout_s: float = 60.0):
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        port = free_port()
        self.proc = subprocess.Popen([binary, *FLAGS, "--user-data-dir=" + self.profile,
                                      "--remote-debugging-port=%d" % port, "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                targets = json.loads(wait_http("http://127.0.0.1:%d/json/list" % port, timeout_s, "chromium"))
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("chromium opened no page within %.0f s" % timeout_s)
                time.sleep(0.2)
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout_s)
        except BaseException:
            self.close()
            raise
        self._id = 0

    def call(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def evaluate(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, predicate, expression: str, timeout_s: float, what: str):
        """Polls `expression` until predicate(value); returns the value. Raises naming `what`."""
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if predicate(value):
                return value
            time.sleep(0.5)
        raise AssertionError("page: %s not found within %.0f s (last value: %.300r)" % (what, timeout_s, value))

    def screenshot(self, path: str) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            shutil.rmtree(self.profile, ignore_errors=True)
