"""The real `attnkit serve` process (subprocess, 127.0.0.1, the shipped small models) against hostile requests:
a huge target, a huge body, text/plain, a wrong Host, a foreign Origin, no or a wrong token, a full queue, a
job past its time limit, a worker killed mid-job. Each gets its status and a message, the server answers
afterwards, and its memory (server + worker processes, psutil RSS) comes back within 1.5x of idle after a
burst of heavy jobs."""

import base64
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest
from PIL import Image

from tiny import SERVED_IN_TESTS

SOURCE = "Y dijo Dios: Sea la luz: y fué la luz."
LONG = (
    "Y vió Dios que la luz era buena: y apartó Dios la luz de las tinieblas. Y llamó Dios á la luz Día, y á las "
    "tinieblas llamó Noche: y fué la tarde y la mañana un día."
)
TOKEN = "abuse-suite-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`attnkit serve` in a subprocess on a free loopback port."""

    def __init__(self, home, *args, token=None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.headers = {"Authorization": f"token {token}"} if token else {}
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("ATTNKIT_TOKEN", None)
        cmd = [sys.executable, "-m", "attnkit.cli", "--home", str(home), "serve", "--port", str(self.port), *args]
        if "--model" not in args:  # the shipped translators and captioners (tiny.SERVED_IN_TESTS says why)
            cmd += ["--model", *SERVED_IN_TESTS]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait(self):
        for _ in range(400):
            try:
                if httpx.get(self.url + "api/models", headers=self.headers, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stdout.read())
            time.sleep(0.25)
        raise RuntimeError("the server did not start")

    def client(self, **kw):
        return httpx.Client(base_url=self.url, timeout=120, headers=self.headers, **kw)

    def rss(self) -> int:
        """Resident memory of the server and every process under it (fork server, workers), in bytes."""
        total = 0
        root = psutil.Process(self.proc.pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total

    def workers(self) -> list[psutil.Process]:
        """The worker processes: forked by the fork server, so grandchildren of the server."""
        root = psutil.Process(self.proc.pid)
        return [p for p in root.children(recursive=True) if p.ppid() != root.pid]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two servers started side by side: one local (1 worker, a queue of 1), one with a token (like a
    non-loopback bind) and a job time limit of half a second."""
    home = tmp_path_factory.mktemp("serve_home")
    local = Server(home, "--workers", "1", "--queue", "1", "--worker-nice", "0", "--model", "rnnsearch-es-en", "transformer-es-en",
                   "captioner-soft")  # fmt: skip
    tokened = Server(
        home, "--token", TOKEN, "--job-timeout", "2", "--worker-nice", "0", "--model", "rnnsearch-es-en", token=TOKEN
    )
    try:
        yield local.wait(), tokened.wait()
    finally:
        local.stop()
        tokened.stop()


def _png(size=(64, 64)) -> bytes:
    buf = io.BytesIO()
    Image.new("L", size, 200).save(buf, format="PNG")
    return buf.getvalue()


def _raw(port, line, *headers):
    """Send a request head (no body) on a raw socket; the answer's status and text."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(("\r\n".join([f"{line} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers]) + "\r\n\r\n").encode())
        data = b""
        while not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def _still_answers(c):
    r = c.post("api/translate", json={"text": "Jesús lloró.", "model": "rnnsearch-es-en", "beam": 1})
    assert r.status_code == 200 and r.json()["translation"] == "Jesus wept."


def _refused(r, status, words):
    assert r.status_code == status, (status, r.status_code, r.text[:300])
    body = r.json()
    assert set(body) == {"error"} and words in body["error"], body


def test_hostile_requests_get_their_4xx_and_the_server_goes_on(servers):
    local, _ = servers
    with local.client() as c:
        t0 = time.perf_counter()
        huge_target = {"text": "hola", "model": "transformer-es-en", "target": "casa " * 2_000_000, "beam": 1}
        _refused(c.post("api/translate", json=huge_target), 413, "the limit of /api/translate")  # 10 MB body
        long_target = {"text": "hola", "model": "transformer-es-en", "target": "casa " * 390, "heads": True}
        _refused(c.post("api/translate", json=long_target), 413, "subword tokens; the limit is 200")
        _refused(c.post("api/translate", json={**long_target, "target": "c" * 2001}), 413, "--max-target-chars")
        _refused(c.post("api/translate", json={"text": "hola", "beam": 17}), 413, "--max-beam")

        def stream(n):  # a body with no Content-Length, counted as it streams
            for _ in range(n):
                yield b"{" * (1 << 20)

        _refused(
            c.post("api/translate", content=stream(300), headers={"Content-Type": "application/json"}),
            413,
            "more than 65536 bytes",
        )
        status, text = _raw(
            local.port, "POST /api/caption", "Content-Type: application/json", "Content-Length: 52428800"
        )
        assert status == 413 and "the limit of /api/caption" in text  # refused before a byte of it is read
        _refused(c.post("api/caption", content=b'{"scene": 1}', headers={"Content-Type": "text/plain"}), 415, "JSON")
        _refused(c.post("api/translate", content=b"text=hola", headers={"Content-Type": "text/plain"}), 415, "JSON")
        _refused(c.post("api/caption", files={"image": ("x.png", _png(), "image/png")}), 415, "not multipart/form-data")
        _refused(c.get("api/models", headers={"Host": "attacker.example"}), 403, "Host header")
        _refused(c.get("api/models", headers={"Host": f"attacker.example:{local.port}"}), 403, "Host header")
        _refused(
            c.post("api/translate", json={"text": "hola"}, headers={"Origin": "http://attacker.example"}),
            403,
            "another origin",
        )
        _refused(
            c.post("api/translate", json={"text": "hola"}, headers={"Origin": f"http://127.0.0.1:{local.port + 1}"}),
            403,
            "another origin",
        )
        _refused(c.get("api/models", headers={"Sec-Fetch-Site": "cross-site"}), 403, "another site")
        big = _png((7000, 7000))  # 49 Mpixel, a small file
        image = {"image": base64.b64encode(big).decode(), "model": "captioner-soft"}
        _refused(c.post("api/caption", json=image), 413, "pixels")
        assert time.perf_counter() - t0 < 60  # sanity only: none of these did the work they asked for
        ok = c.post("api/translate", json={"text": "hola"}, headers={"Origin": f"http://127.0.0.1:{local.port}"})
        assert ok.status_code == 200  # the page's own origin is welcome
        up = c.post("api/caption", json={"image": "data:image/png;base64," + base64.b64encode(_png()).decode()})
        assert up.status_code == 200 and up.json()["words"]
        _still_answers(c)
    assert local.proc.poll() is None


def test_per_head_maps_come_in_pieces_under_the_answer_limit(servers):
    local, _ = servers
    with local.client() as c:
        full = c.post("api/translate", json={"text": SOURCE, "model": "transformer-es-en", "beam": 1, "heads": True})
        assert full.status_code == 200
        heads = full.json()["heads"]
        one = c.post(
            "api/translate", json={"text": SOURCE, "model": "transformer-es-en", "beam": 1, "heads": True, "layer": 3}
        ).json()["heads"]
        assert one["layer"] == 3 and one["cross"] == heads["cross"][2:3] and one["enc_self"] == heads["enc_self"][2:3]
        assert one["rollout"] is None
        _refused(
            c.post("api/translate", json={"text": SOURCE, "model": "transformer-es-en", "heads": True, "layer": 4}),
            400,
            "layer must be in 1..3",
        )


def test_a_token_is_needed_on_every_route_and_checked(servers):
    _, tokened = servers
    bare = httpx.Client(base_url=tokened.url, timeout=60)
    for path in ("api/models", "api/limits", "openapi.json", "docs", "", "api/progress/x"):
        _refused(bare.get(path), 401, "needs its token")
        _refused(bare.get(path, headers={"Authorization": "token wrong-token-0123456789"}), 401, "needs its token")
    _refused(bare.post("api/translate", json={"text": "hola"}), 401, "needs its token")
    assert bare.get("static/app.js").status_code == 200  # the page's own scripts hold no secret
    assert bare.get("docs-static/swagger-ui-bundle.js").status_code == 200
    authed = tokened.client()
    assert authed.get("api/limits").json()["token_required"] is True
    _still_answers(authed)
    # the first page load with ?token= leaves the token in a cookie that the page's requests then carry
    page = bare.get(f"?token={TOKEN}")
    assert page.status_code == 200 and "attnkit explorer" in page.text
    cookie = page.headers.get_list("set-cookie")
    assert any(c.startswith(f"attnkit-token-{tokened.port}=") and "HttpOnly" in c and "SameSite=strict" in c
               for c in cookie)  # fmt: skip
    assert bare.get("api/models").status_code == 200  # httpx kept the cookie, as a browser does
    docs = bare.get("docs")
    assert docs.status_code == 200 and "/docs-static/swagger-ui-bundle.js" in docs.text and "cdn" not in docs.text


def test_a_job_over_its_time_limit_is_stopped_with_504(servers):
    _, tokened = servers
    with tokened.client() as c:
        body = {"text": LONG, "model": "rnnsearch-es-en", "beam": 1, "method": "integrated_gradients"}
        r = c.post("api/translate", json=body)
        _refused(r, 504, "time limit of 2 s")
        _still_answers(c)
        ok = c.post("api/translate", json={**body, "text": "Jesús lloró.", "method": "attention_norm"})
        assert ok.status_code == 200 and ok.json()["attribution"]["method"] == "attention_norm"


def _heavy(local, job, text=LONG, cookies=None, method="saliency"):
    """A heavy job of a few seconds: saliency needs one backward pass per target piece (integrated gradients,
    one per interpolation point as well: several times longer)."""
    body = {"text": text, "model": "transformer-es-en", "beam": 1, "method": method, "job": job}
    with local.client(cookies=cookies) as c:
        return c.post("api/translate", json=body)


def _post_open(port, path, body, cookie):
    """POST a JSON body on a raw socket and leave the connection open: the request runs until the caller
    closes the socket (the server then cancels it, as when a person closes the page)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = [f"POST /{path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
            f"Content-Length: {len(data)}", f"Cookie: {cookie}"]  # fmt: skip
    s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    return s


def test_a_full_queue_is_503_with_retry_after_and_the_queue_position_is_shown(servers):
    local, _ = servers
    cookies = {f"attnkit-session-{local.port}": "queue-test-session-0001"}
    # the first job is a long one, held open on a socket, so that it still runs (and the second still waits)
    # when the third comes; closing the socket at the end cancels it, and the second then runs
    first = {"text": LONG, "model": "transformer-es-en", "beam": 1, "method": "integrated_gradients", "job": "first"}
    held = _post_open(local.port, "api/translate", first, "; ".join(f"{k}={v}" for k, v in cookies.items()))
    answers = {}
    second = threading.Thread(target=lambda: answers.setdefault("second", _heavy(local, "second", cookies=cookies)))
    try:
        with local.client(cookies=cookies) as c:
            for _ in range(400):  # the first is running
                if (c.get("api/progress/first").json()["progress"] or 0) > 0:
                    break
                time.sleep(0.05)
            second.start()
            for _ in range(400):  # the second waits in the queue, first in line, and its owner sees so
                if c.get("api/progress/second").json()["queued"] == 1:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the second job never showed as queued")
            # the fast lane: a plain translation sent after the heavy jobs is answered while they still run and wait
            _still_answers(c)
            status = c.get("api/progress/second").json()
            assert status["queued"] == 1 and "second" not in answers
            assert status["wait_s"] is None or status["wait_s"] > 0  # the expected wait, once a job has been timed
            third = _heavy(local, "third")  # one worker, a queue of one: no room
            _refused(third, 503, "the server is busy")
            assert 1 <= int(third.headers["Retry-After"]) <= 300
            r = c.post("api/translate", json={"text": SOURCE, "model": "transformer-es-en", "beam": 5, "heads": True})
            assert r.status_code == 200 and r.json()["heads"] is not None
            assert "second" not in answers  # the first still runs
    finally:
        held.close()  # the first's page goes away: its job is stopped, and the second gets the worker
    second.join()
    assert answers["second"].status_code == 200 and answers["second"].json()["attribution"]["method"] == "saliency"


def test_a_worker_killed_mid_job_answers_503_and_the_server_goes_on(servers):
    local, _ = servers
    cookies = {f"attnkit-session-{local.port}": "kill-test-session-0001"}
    answer = {}
    t = threading.Thread(target=lambda: answer.setdefault("r", _heavy(local, "victim", cookies=cookies)))
    t.start()
    with local.client(cookies=cookies) as c:
        for _ in range(400):
            if (c.get("api/progress/victim").json()["progress"] or 0) > 0:
                break
            time.sleep(0.05)
        busy = local.workers()  # --workers 1: the one worker is the one running it
        assert len(busy) == 1, busy
        busy[0].kill()
        t.join(timeout=60)
        _refused(answer["r"], 503, "worker process running this job stopped")
        _still_answers(c)
        again = c.post("api/translate", json={"text": SOURCE, "model": "transformer-es-en", "method": "alti_plus"})
        assert again.status_code == 200 and again.json()["attribution"]["method"] == "alti_plus"  # a fresh worker
    assert local.proc.poll() is None


def test_memory_comes_back_after_a_burst_of_heavy_jobs(servers):
    local, _ = servers
    with local.client() as c:  # every kind of request once, so lazy caches are in the idle figure
        _still_answers(c)
        c.post("api/translate", json={"text": SOURCE, "model": "transformer-es-en", "beam": 1, "method": "saliency"})
    time.sleep(1.0)
    idle = local.rss()
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(_heavy(local, f"m{i}", text=SOURCE)))
               for i in range(2)]  # fmt: skip
    peak = idle
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, local.rss())
        time.sleep(0.1)
    assert sorted(r.status_code for r in results) == [200, 200]
    for _ in range(100):  # the workers that ran the jobs are gone; fresh ones hold no job's memory
        after = local.rss()
        if after <= 1.5 * idle:
            break
        time.sleep(0.1)
    assert after <= 1.5 * idle, (idle, peak, after)


ATTACK_PAGE = """<!doctype html><html><body><form id="f" method="POST" enctype="text/plain" target="sink"
action="TARGETapi/translate"><input name='{"text":"hola","x":"' value='"}'></form><iframe name="sink"></iframe>
<script>
const T = "TARGET", job = {text: "hola", model: "transformer-es-en", beam: 1, method: "saliency"};
async function attack() {
  const r = {};
  try {  // JSON needs the browser to ask first (a preflight), and the server says no
    const x = await fetch(T + "api/translate", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(job)});
    r.json = "read " + (await x.text());
  } catch (e) { r.json = "blocked"; }
  try {  // a "simple" request is sent without asking: the server must refuse it unread, and the page sees nothing
    const x = await fetch(T + "api/translate", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"},
      body: JSON.stringify(job)});
    r.plain = x.type + " " + x.status + " " + (await x.text()).length;
  } catch (e) { r.plain = "blocked"; }
  try { const x = await fetch(T + "api/models"); r.get = "read " + (await x.text()).slice(0, 40); }
  catch (e) { r.get = "blocked"; }
  document.getElementById("f").submit();  // a form post: navigates the hidden frame
  return r;
}
</script></body></html>"""


def test_a_page_of_another_origin_cannot_start_a_job_or_read_an_answer(servers):
    """Chromium, two loopback origins: a page on another port tries JSON, no-cors text/plain, a GET and a form
    post against the server; it reads nothing, and every request that reached the server was refused (403)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    local, _ = servers
    page_html = ATTACK_PAGE.replace("TARGET", local.url).encode()

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page_html)

        def log_message(self, *args):
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    seen = []
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium), args=["--headless", "--no-sandbox"])
            page = browser.new_page()
            page.on("response", lambda r: seen.append((r.request.method, r.url, r.status)))
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
            got = page.evaluate("attack()")
            page.wait_for_timeout(1000)  # the form post's answer
            own = browser.new_page()  # the server's own page may do all of it
            own.goto(local.url)
            ok = own.evaluate(
                "fetch('api/translate', {method: 'POST', headers: {'Content-Type': 'application/json'}, "
                "body: JSON.stringify({text: 'Jesús lloró.', model: 'rnnsearch-es-en', beam: 1})}).then(r => r.json())"
            )
            _, tokened = servers  # a server with a token: the page opened once with ?token= keeps it in a cookie
            tok = browser.new_page()
            tok.goto(tokened.url + f"?token={TOKEN}")
            with_cookie = tok.evaluate("fetch('api/models').then(r => r.status)")
            fresh = browser.new_context().new_page()
            fresh.goto(tokened.url)
            without = fresh.evaluate("fetch('api/models').then(r => r.status)")
            browser.close()
    finally:
        evil.shutdown()
    assert (with_cookie, without) == (200, 401)
    assert got["json"] == "blocked" and got["get"] == "blocked", got
    assert got["plain"] == "opaque 0 0", got  # nothing readable
    at_server = [(m, s) for m, url, s in seen if url.startswith(local.url)]
    assert ("POST", 403) in at_server and all(s == 403 for _, s in at_server), at_server
    assert ok["translation"] == "Jesus wept."


# ------------------------------------------------------------------ connections that never complete a request
SLOW_CAPS = (
    "--max-client-connections",
    "4",
    "--header-timeout",
    "1",
    "--body-timeout",
    "2",
    "--limit-concurrency",
    "2",
)


@pytest.fixture(scope="module")
def slow_servers(tmp_path_factory):
    """Two small servers with small connection caps (4 a client, a 1-s header and a 2-s body timeout, 2
    requests in flight): one on loopback without a token, one with a token."""
    home = tmp_path_factory.mktemp("slow_home")
    common = ("--workers", "1", "--model", "rnnsearch-es-en", *SLOW_CAPS)
    plain = Server(home, *common)
    tokened = Server(home, *common, "--token", TOKEN, token=TOKEN)
    try:
        yield {"loopback": plain.wait(), "token": tokened.wait()}
    finally:
        plain.stop()
        tokened.stop()


def _idle_socket(port, source):
    """A socket from loopback address ``source`` to the server that sends nothing."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    return s


def _closed(s) -> bool:
    """Whether the server has closed ``s`` (end of stream or reset), reading what it sent first."""
    try:
        while True:
            if s.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def _wait_closed(socks, seconds=15.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if all(_closed(s) for s in socks):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("which", ["loopback", "token"])
def test_idle_and_trickling_connections_are_capped_and_closed_and_others_are_served(slow_servers, which):
    server = slow_servers[which]
    held = [_idle_socket(server.port, "127.0.0.2") for _ in range(4)]  # the client's cap
    over = _idle_socket(server.port, "127.0.0.2")
    try:
        assert _wait_closed([over], 5)  # one more from that address: closed as it opens
        assert not any(_closed(s) for s in held)  # the four are still open
        with server.client() as c:  # another client is served meanwhile
            _still_answers(c)
        # a head trickled a byte at a time: the clock does not restart with each byte
        trickle = _idle_socket(server.port, "127.0.0.3")
        head = f"GET /api/models HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()
        sent = 0
        for b in head:
            if _closed(trickle):
                break
            with contextlib.suppress(OSError):
                trickle.send(bytes([b]))
            sent += 1
            time.sleep(0.2)
        assert sent < len(head) and _closed(trickle)  # cut off before its head was whole (~10 s of bytes)
        trickle.close()
        assert _wait_closed(held, 10)  # no request head within --header-timeout: closed
    finally:
        for s in [*held, over]:
            s.close()
    with server.client() as c:
        _still_answers(c)
    assert server.proc.poll() is None


def _half_body(port, source, token=None):
    """A POST that declares 1000 bytes of body and sends 10; the socket (blocking, 20-s timeout)."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(20)
    s.connect(("127.0.0.1", port))
    head = ["POST /api/translate HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
            "Content-Length: 1000"] + ([f"Authorization: token {token}"] if token else [])  # fmt: skip
    s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b'{"text": "')
    return s


def _answer(s) -> tuple[int, dict, bool]:
    """Status, JSON body and whether the server then closed the connection (end of stream within 20 s)."""
    data, ended = b"", False
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            data += chunk
        ended = True
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body[: int(head.lower().split(b"content-length: ")[1].split()[0])]), ended


@pytest.mark.parametrize("which", ["loopback", "token"])
def test_half_sent_bodies_take_no_request_place_and_get_408(slow_servers, which):
    """--limit-concurrency 2: three bodies that stop half-way (from three addresses) leave room for a whole
    request, and get 408 JSON after --body-timeout; without the token they get 401 at once."""
    server = slow_servers[which]
    token = TOKEN if which == "token" else None
    stuck = [_half_body(server.port, f"127.0.0.{4 + k}", token) for k in range(3)]
    try:
        time.sleep(0.3)  # they have reached the guard
        with server.client() as c:
            _still_answers(c)
        for s in stuck:
            status, body, closed = _answer(s)
            assert (status, closed) == (408, True) and "--body-timeout" in body["error"], body
    finally:
        for s in stuck:
            s.close()
    if token is not None:  # no token: refused before its body is read; the header clock then closes it
        s = _half_body(server.port, "127.0.0.7")
        with contextlib.closing(s):
            status, body, closed = _answer(s)
        assert (status, closed) == (401, True) and "token" in body["error"]


def test_the_favicon_answers_without_the_token(slow_servers):  # a data: URL without a comma: test_explorer_api
    server = slow_servers["loopback"]
    with server.client() as c:
        icon = c.get("favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        assert 'rel="icon"' in c.get("").text
    with httpx.Client(base_url=slow_servers["token"].url, timeout=30) as bare:  # public, like the page's scripts
        assert bare.get("favicon.ico").status_code == 200 and bare.get("api/models").status_code == 401


def test_a_wrong_host_is_refused_without_naming_this_machine_to_a_caller_without_the_token(slow_servers):
    server = slow_servers["token"]
    bare = httpx.Client(base_url=server.url, timeout=30)
    r = bare.get("api/models", headers={"Host": "attacker.example"})
    _refused(r, 403, "Host header")
    assert "allowed" not in r.json()["error"] and "127.0.0.1" not in r.json()["error"]
    with server.client() as c:  # the token's holder is told which names the server answers
        _refused(c.get("api/models", headers={"Host": "attacker.example"}), 403, "allowed: 127.0.0.1")


def test_a_second_server_on_a_port_fails_before_saying_open_and_a_stop_removes_the_temp_folder(tmp_path):
    import glob
    import tempfile

    first = Server(tmp_path, "--workers", "1", "--model", "rnnsearch-es-en").wait()
    try:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "attnkit.cli", "--home", str(tmp_path), "serve", "--port", str(first.port)]
        second = subprocess.run([*cmd, "--model", "rnnsearch-es-en"], env=env, capture_output=True, text=True,
                                timeout=120)  # fmt: skip
        assert second.returncode != 0 and "open http" not in second.stdout, second.stdout
        assert "another server listens there" in second.stderr, second.stderr
        ours = glob.glob(os.path.join(tempfile.gettempdir(), f"attnkit-serve-{first.proc.pid}-*"))
        assert len(ours) == 1  # the server's own temp folder, where its workers keep their pymp-* folders
        with first.client() as c:
            _still_answers(c)
    finally:
        first.stop()
    assert first.proc.returncode is not None and not os.path.exists(ours[0])


DECODE_PEAK = """
import resource, sys
from attnkit.explorer.routes.caption import decode_image
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
x = decode_image(data, 64, 40_000_000, 160_000_000)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(data), (peak - before) // 1024, float(x.min()), float(x.max()), tuple(x.shape))
"""


def test_a_big_cheap_png_is_decoded_with_bounded_memory_and_refused_over_the_decode_cap(tmp_path):
    """A solid 6000x6000 RGBA PNG (a few KB): decoded in a fresh process, its peak resident size grows by
    little more than the decode itself (144 MB as uint8; the full-size conversions it used to make cost
    ~560 MB), and the answer is the colour on black in grayscale; over --max-decode-bytes, 413 unread."""
    from attnkit.explorer.api_errors import ApiError
    from attnkit.explorer.routes.caption import decode_image

    png = tmp_path / "big.png"
    Image.new("RGBA", (6000, 6000), (200, 100, 50, 180)).save(png, format="PNG")  # 36 Mpx in a few KB
    out = subprocess.run([sys.executable, "-c", DECODE_PEAK, str(png)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    size, grew_mb, lo, hi, shape = out.stdout.split(maxsplit=4)
    assert int(size) < 1_000_000 and shape.strip() == "(1, 64, 64)"
    gray = (0.299 * 200 + 0.587 * 100 + 0.114 * 50) * 180 / 255 / 255  # luma of the colour, times its alpha
    assert abs(float(lo) - gray) < 0.01 and abs(float(hi) - gray) < 0.01
    assert int(grew_mb) < 300, grew_mb
    buf = io.BytesIO()
    Image.new("RGBA", (6000, 6000), (1, 2, 3, 4)).save(buf, format="PNG")
    with pytest.raises(ApiError) as refused:
        decode_image(buf.getvalue(), 64, 40_000_000, 100_000_000)
    assert refused.value.status == 413 and "--max-decode-bytes" in str(refused.value)
