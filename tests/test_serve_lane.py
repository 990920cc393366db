"""The serving parts that decide who waits for what, in-process: the fast lane (order, dynamic batching,
cancellation), the heavy queue's admission by expected wait, and the in-flight request limit. No timed
assertions: each test holds the work back with an event and asserts on order, counts and statuses."""

import asyncio
import json
import threading

import pytest

from answers import assert_same_answer
from attnkit.explorer.api_errors import ApiError
from attnkit.explorer.inflight import InFlightLimit
from attnkit.explorer.jobs import JobQueue
from attnkit.explorer.lane import FastLane
from attnkit.explorer.options import ServeOptions
from attnkit.explorer.payload import translation_payload
from attnkit.service import TranslationRequest

# different lengths, so a batch is padded
SOURCES = [
    "Jesús lloró.",
    "Y dijo Dios: Sea la luz: y fué la luz.",
    "En el principio crió Dios los cielos y la tierra.",
    "Y vió Dios que la luz era buena: y apartó Dios la luz de las tinieblas.",
    "Bienaventurados los pobres en espíritu: porque de ellos es el reino de los cielos.",
]


@pytest.fixture(scope="module")
def translators():
    from attnkit.explorer.app import load_models

    return load_models(["transformer-es-en", "rnnsearch-es-en"]).translators


def _hold(lane: FastLane) -> threading.Event:
    """Occupy the lane's thread until the returned event is set, so that what is submitted next waits."""
    go, started = threading.Event(), threading.Event()
    lane.submit(lambda: (started.set(), go.wait(60)))
    assert started.wait(60)
    return go


@pytest.mark.parametrize("name", ["transformer-es-en", "rnnsearch-es-en"])
@pytest.mark.parametrize("beam", [1, 5])
def test_translations_waiting_together_are_one_batch_with_the_answers_they_would_have_alone(translators, name, beam):
    tr = translators[name]
    alone = [translation_payload(tr, s, beam=beam, heads=True, model=name) for s in SOURCES]  # the reference
    lane = FastLane(max_batch=8)
    go = _hold(lane)
    futures = [lane.submit_translation(translation_payload, tr, s, beam, heads=True, model=name) for s in SOURCES]
    go.set()
    got = [f.result(120) for f in futures]
    lane.stop()
    assert lane.batches[len(SOURCES)] == 1  # one search for all five
    for a, b in zip(got, alone):
        assert_same_answer(a, b)


def test_the_lane_keeps_order_and_batches_only_alike_requests(translators):
    """The oldest request goes first; translations of its model and beam join its batch, others keep their
    turn; a batch is at most max_batch."""
    t, r = translators["transformer-es-en"], translators["rnnsearch-es-en"]
    order = []

    def record(translator, source, *, beam, result=None, forced=None):
        order.append((translator is t, beam, source, result is not None))
        return source

    lane = FastLane(max_batch=2)
    go = _hold(lane)
    plan = [(t, 1, SOURCES[0]), (r, 1, SOURCES[1]), (t, 1, SOURCES[2]), (t, 5, SOURCES[3]), (t, 1, SOURCES[4])]
    futures = [lane.submit_translation(record, tr, s, b) for tr, b, s in plan]
    other = lane.submit(lambda: "caption")
    go.set()
    assert [f.result(120) for f in futures] == [s for _, _, s in plan] and other.result(60) == "caption"
    lane.stop()
    assert order == [
        (True, 1, SOURCES[0], True),  # the head, batched with the next alike one (max_batch 2)
        (True, 1, SOURCES[2], True),
        (False, 1, SOURCES[1], False),  # alone: searched by the payload builder itself
        (True, 5, SOURCES[3], False),
        (True, 1, SOURCES[4], False),
    ]
    assert dict(lane.batches) == {2: 1, 1: 3}


def test_a_cancelled_request_never_runs_and_an_error_stays_with_its_request(translators):
    tr = translators["rnnsearch-es-en"]
    ran = []

    def build(translator, source, *, beam, result=None, forced=None):
        ran.append(source)
        if source == SOURCES[1]:
            raise ValueError("this one is bad")
        return source

    lane = FastLane(max_batch=8)
    go = _hold(lane)
    futures = [lane.submit_translation(build, tr, s, 1) for s in SOURCES[:3]]
    assert futures[2].cancel()  # its client went while it waited
    go.set()
    assert futures[0].result(60) == SOURCES[0]
    with pytest.raises(ValueError, match="this one is bad"):
        futures[1].result(60)
    lane.stop()
    assert ran == SOURCES[:2]


# ------------------------------------------------------------------------------------------- the heavy queue


async def _connected() -> bool:
    return False


def test_a_job_that_would_wait_past_its_time_limit_is_refused_at_once_with_retry_after():
    """One worker, jobs of this kind ~4 s recently, a 10-s limit: the first runs, two wait (expected 4 and
    8 s), the fourth would wait ~12 s and gets 503 at once; the admitted ones then finish in order."""
    queue = JobQueue(ServeOptions(workers=1, queue=8, job_timeout=10), {})
    queue.recent["translation j beam"] = 4.0
    finished = []

    async def main():
        release = asyncio.Event()

        async def execute(slot, label, request, disconnected, spec=None):  # a job that ends when told
            await release.wait()
            finished.append(request.beam - 1)
            return {"n": request.beam - 1}

        queue._execute = execute
        running = [
            asyncio.ensure_future(queue.run(None, None, "j", TranslationRequest("s", beam=i + 1), _connected))
            for i in range(3)
        ]
        for _ in range(10):
            await asyncio.sleep(0)
        assert queue.expected_wait(2) == pytest.approx(12.0, abs=0.1)  # ~4 s left of the running, two of 4 s
        with pytest.raises(ApiError) as refused:
            await queue.run(None, None, "j", TranslationRequest("s", beam=4), _connected)
        assert not release.is_set()  # refused while the others still wait: no waiting of its own
        release.set()
        return [await t for t in running], refused.value

    answers, err = asyncio.run(main())
    assert answers == [{"n": 0}, {"n": 1}, {"n": 2}] and finished == [0, 1, 2]
    assert err.status == 503 and "about 12 s before a worker is free" in str(err) and "--job-timeout 10 s" in str(err)
    assert err.headers["Retry-After"] == "4"  # until the running job is expected to end
    assert set(queue.recent) == {"translation j beam"}  # the three jobs' times were recorded under their kind


def test_each_kind_of_job_has_its_own_expected_time_and_an_untimed_kind_counts_half_the_limit():
    """A burst of a kind never timed (integrated gradients on a fresh server) is admitted only as deep as
    jobs of half the time limit could be served in time; a timed kind's own mean counts."""
    queue = JobQueue(ServeOptions(workers=1, queue=8, job_timeout=100), {})
    assert queue.expected_s("translation m integrated_gradients") == 50.0
    queue._record("translation m saliency", 2.0)
    queue._record("translation m saliency", 4.0)
    assert queue.expected_s("translation m saliency") == pytest.approx(0.7 * 2 + 0.3 * 4)
    assert queue.expected_s("translation m integrated_gradients") == 50.0  # its own, not saliency's

    async def main():
        release = asyncio.Event()

        async def execute(slot, label, request, disconnected, spec=None):
            await release.wait()
            return {}

        queue._execute = execute
        ig = TranslationRequest("s", method="integrated_gradients")
        admitted = [asyncio.ensure_future(queue.run(None, None, "m", ig, _connected)) for _ in range(3)]
        for _ in range(10):
            await asyncio.sleep(0)
        # one runs (~50 s left), two wait: a fourth would wait ~150 s > 100 s
        with pytest.raises(ApiError) as refused:
            await queue.run(None, None, "m", ig, _connected)
        release.set()
        for t in admitted:
            await t
        return refused.value

    err = asyncio.run(main())
    assert err.status == 503 and "about 150 s before a worker is free" in str(err)
    assert queue.expected_s("translation m integrated_gradients") < 1.0  # now timed: they ended at once


def test_an_admitted_job_that_cannot_start_within_its_time_limit_leaves_the_queue_with_503():
    """The estimate admitted it (jobs of this kind took 0.01 s), but the running one does not end: after
    --job-timeout of waiting the queued job gets 503 with Retry-After, and the queue is empty again."""
    queue = JobQueue(ServeOptions(workers=1, queue=8, job_timeout=0.5), {})
    queue.recent["translation w beam"] = 0.01

    async def main():
        release = asyncio.Event()

        async def execute(slot, label, request, disconnected, spec=None):
            await release.wait()
            return {}

        queue._execute = execute
        running = asyncio.ensure_future(queue.run(None, None, "w", TranslationRequest("s"), _connected))
        for _ in range(10):
            await asyncio.sleep(0)
        with pytest.raises(ApiError) as refused:
            await queue.run(None, None, "w", TranslationRequest("s"), _connected)
        waiting = len(queue._waiting)
        release.set()
        await running
        return refused.value, waiting

    err, waiting = asyncio.run(main())
    assert err.status == 503 and "waited 0.5 s for a worker" in str(err) and int(err.headers["Retry-After"]) >= 1
    assert waiting == 0 and queue._free == [0]


# ------------------------------------------------------------------------------------------- in-flight limit


def test_requests_beyond_the_in_flight_limit_get_a_json_503():
    release = asyncio.Event()

    async def app(scope, receive, send):  # an app whose answers wait until told
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limit = InFlightLimit(app, limit=2)

    async def call():
        sent = []

        async def send(message):
            sent.append(message)

        await limit({"type": "http"}, None, send)
        return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"]

    async def main():
        held = [asyncio.ensure_future(call()) for _ in range(2)]
        for _ in range(10):
            await asyncio.sleep(0)
        refused = await call()
        release.set()
        return [await h for h in held], refused, await call()

    held, (status, headers, body), later = asyncio.run(main())
    assert [h[0] for h in held] == [200, 200] and later[0] == 200  # the limit frees as answers end
    assert status == 503 and headers[b"retry-after"] == b"1" and headers[b"content-type"] == b"application/json"
    assert "--limit-concurrency" in json.loads(body)["error"]


def test_two_lane_threads_run_two_calls_at_once_and_share_the_expected_wait():
    """With --fast-lanes 2 a second call runs while the first still runs; a third waits for either, and the
    expected wait counts both threads."""
    lane = FastLane(max_batch=8, threads=2)
    first = _hold(lane)
    second = _hold(lane)  # would never start with one thread: _hold fails after 60 s
    third = lane.submit(lambda: "third")
    lane.recent_s = 1.0
    assert lane.waiting() == 1 and not third.done()
    assert lane.expected_wait() == 1.0  # (one waiting + one running) x 1 s, over 2 threads
    first.set()
    assert third.result(timeout=60) == "third"
    second.set()
    lane.stop()


def test_stop_waits_for_the_threads_after_their_current_call():
    """stop() returns once the lane's threads have ended (a running call finishes first, a waiting one is
    cancelled), so that a process exiting right after it has no thread of the lane left inside torch."""
    before = set(threading.enumerate())
    lane = FastLane(max_batch=8, threads=2)
    first, second = _hold(lane), _hold(lane)
    waiting = lane.submit(lambda: "never run")
    threads = [t for t in set(threading.enumerate()) - before if t.name.startswith("attnkit-fast-lane-")]
    assert len(threads) == 2 and all(t.is_alive() for t in threads)
    for go in (first, second):
        threading.Timer(0.2, go.set).start()  # the held calls end while stop() waits for them
    lane.stop()
    assert not any(t.is_alive() for t in threads)
    assert waiting.cancelled()


def test_two_lane_threads_give_the_answers_of_one(translators):
    """Batches searched at the same time on two threads (the models shared, no lock) answer as one thread does."""
    name = "transformer-es-en"
    tr = translators[name]
    answers = {}
    for threads in (1, 2):
        lane = FastLane(max_batch=2, threads=threads)
        futures = [lane.submit_translation(translation_payload, tr, s, 5, heads=True, model=name) for s in SOURCES]
        answers[threads] = [f.result(timeout=120) for f in futures]
        lane.stop()
    for one, two in zip(answers[1], answers[2]):
        assert_same_answer(two, one)


def test_a_light_request_that_would_wait_past_fast_wait_gets_503_at_once(translators):
    """The lane's expected wait is the requests ahead times their recent mean time; beyond --fast-wait a
    plain translation is refused with Retry-After instead of joining the line, and served once it is short."""
    from fastapi.testclient import TestClient

    from attnkit.explorer.app import create_app, load_models

    models = load_models(["rnnsearch-es-en"])
    app = create_app(models, options=ServeOptions(fast_wait=2.0, fast_lanes=1), verses=[])
    client = TestClient(app, base_url="http://127.0.0.1")
    lane = app.state.explorer.lane
    body = {"text": "Jesús lloró.", "model": "rnnsearch-es-en", "beam": 1}
    assert client.post("/api/translate", json=body).status_code == 200  # times the lane
    assert lane.recent_s is not None and lane.recent_s > 0
    go = _hold(lane)
    lane.recent_s = 1.0  # as if each request took a second
    for _ in range(4):
        lane.submit(lambda: None)
    assert lane.expected_wait() == 5.0
    r = client.post("/api/translate", json=body)
    assert r.status_code == 503 and r.headers["Retry-After"] == "3", r.text
    assert "would wait about 5 s, more than --fast-wait 2 s" in r.json()["error"]
    assert lane.waiting() == 4  # it never joined the line
    go.set()
    for _ in range(200):  # the held requests drain
        if lane.waiting() == 0:
            break
        threading.Event().wait(0.05)
    lane.recent_s = 0.1
    assert client.post("/api/translate", json=body).json()["translation"] == "Jesus wept."


def test_a_cancelled_request_stops_its_job_and_frees_its_worker():
    """A request whose awaiting is cancelled (a streamed answer whose client went: /api/flow/stream) cancels
    the job in the pool, which ends the worker running it, and gives its slot back; the streamed file's name
    reaches the worker with the job."""
    from concurrent.futures import Future

    from attnkit.service import LMViewRequest

    queue = JobQueue(ServeOptions(workers=1, queue=2, job_timeout=10), {})
    scheduled = []

    class Pool:  # never finishes a job: only a cancel ends it
        def schedule(self, fn, args, timeout):
            scheduled.append((args, Future()))
            return scheduled[-1][1]

    queue.start = lambda: Pool()

    async def main():
        job = asyncio.ensure_future(
            queue.run(None, None, "lm", LMViewRequest("a b"), _connected, stream="/tmp/x.ndjson")
        )
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(scheduled) == 1 and not scheduled[0][1].cancelled()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(main())
    ((args, future),) = scheduled
    assert args[-1] == "/tmp/x.ndjson" and future.cancelled()
    assert queue._free == [0] and not queue._running
