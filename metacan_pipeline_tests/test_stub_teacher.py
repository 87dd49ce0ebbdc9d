"""Tests of the stub teacher (metacan_pipeline_tests/stub_teacher/), run for real as a subprocess over loopback."""

import json
import os
import signal
import time

import httpx
import pytest

from metacan_pipeline.teachers.core.validate import LABEL_FIELDS, validate_label
from metacan_pipeline_tests.stub_teacher.labels import stub_label
from metacan_pipeline_tests.stub_teacher.process import run_stub
from metacan_pipeline_tests.stub_teacher.protocol import FAULT_MODES, JSON_SCHEMA_REJECTED, REFUSAL_TEXT


def batch_body(records: list[dict], **extra) -> dict:
    """A request body in the batched protocol: one JSON record per line between <records> lines."""
    lines = "\n".join(json.dumps(r).replace("<", "\\u003c").replace(">", "\\u003e") for r in records)
    user = f'Label each record.\n<records>\n{lines}\n</records>\nReply with {{"labels": [...]}}.'
    return {
        "model": "stub-teacher",
        "temperature": 0,
        "max_tokens": 2000,
        "messages": [{"role": "system", "content": "rubric"}, {"role": "user", "content": user}],
        **extra,
    }


def works(*titles: str) -> list[dict]:
    return [{"id": f"W{100 + i}", "title": t, "year": 2020, "language": "en"} for i, t in enumerate(titles)]


def stats(client: httpx.Client, base_url: str) -> dict:
    return client.get(base_url.removesuffix("/v1") + "/stats").json()


@pytest.fixture(scope="module")
def stub():
    with run_stub() as (base_url, _proc), httpx.Client(base_url=base_url, timeout=10) as client:
        yield base_url, client


def test_a_batch_of_three_gets_three_valid_labels_in_order(stub):
    base_url, client = stub
    recs = works("Reporting quality of trials", "Soil <b>bacteria</b> </records> in Alberta", "Peer review at CIHR")
    r = client.post(
        "/chat/completions",
        json=batch_body(recs, logprobs=True, response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
    )
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["refusal"] is None
    labels = json.loads(choice["message"]["content"])["labels"]
    assert [lab["id"] for lab in labels] == [w["id"] for w in recs]
    for lab, w in zip(labels, recs, strict=False):
        assert set(lab) == set(LABEL_FIELDS)
        validate_label(lab, w["id"])  # raises on any rule break
        assert lab == stub_label(w["id"])  # deterministic
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] > 10 and usage["completion_tokens"] > 50
    assert choice["logprobs"]["content"] and all({"token", "logprob"} <= set(t) for t in choice["logprobs"]["content"])
    assert client.get("/models").json()["data"][0]["id"] == "stub-teacher"
    # without "logprobs": true there are none
    plain = client.post("/chat/completions", json=batch_body(recs)).json()["choices"][0]
    assert plain["logprobs"] is None and plain["message"]["content"] == choice["message"]["content"]


def test_labels_follow_the_vocabulary_rules_and_about_a_tenth_are_metaresearch():
    labels = [stub_label(f"W{i}") for i in range(5000)]
    for lab in labels:
        validate_label(lab, lab["id"])
    share = sum("metaresearch" in lab["categories"] for lab in labels) / len(labels)
    assert 0.08 < share < 0.12
    assert any(lab["categories"] == ["insufficient_payload"] for lab in labels)
    assert sum(lab["categories"] == [] for lab in labels) > 0.8 * len(labels)


@pytest.mark.parametrize("mode", sorted(FAULT_MODES))
def test_each_fault_mode_does_what_it_promises(stub, mode):
    base_url, client = stub
    recs = works("A clean title", f"Some title FAULT:{mode}", "Another clean title")
    before = stats(client, base_url)
    body = batch_body(recs)
    if mode == "drop":
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/chat/completions", json=body)
    else:
        r = client.post("/chat/completions", json=body)
        if mode == "http500":
            assert r.status_code == 500 and "error" in r.json()
        else:
            assert r.status_code == 200
            choice = r.json()["choices"][0]
            content = choice["message"]["content"]
            if mode == "refusal":
                assert content is None and choice["message"]["refusal"] == REFUSAL_TEXT
            elif mode == "empty":
                assert content == ""
            elif mode == "malformed":
                with pytest.raises(json.JSONDecodeError):
                    json.loads(content)
            elif mode == "truncated":
                assert choice["finish_reason"] == "length" and content.startswith('{"labels":[')
                with pytest.raises(json.JSONDecodeError):
                    json.loads(content)
            else:
                labels = json.loads(content)["labels"]
                ids = [lab["id"] for lab in labels]
                if mode == "wrong_id":
                    assert ids == ["W100", "W101_wrong", "W102"]
                elif mode == "missing_id":
                    assert ids == ["W100", "W102"]
                elif mode == "oov":
                    assert [lab["genre"] == "novel" for lab in labels] == [False, True, False]
    after = stats(client, base_url)
    assert after["calls"] == before["calls"] + 1 and after["faults"][mode] == before["faults"][mode] + 1
    # the fault follows the record, not the connection: a batch without it is served normally
    clean = client.post("/chat/completions", json=batch_body([recs[0], recs[2]]))
    assert [lab["id"] for lab in json.loads(clean.json()["choices"][0]["message"]["content"])["labels"]] == [
        "W100",
        "W102",
    ]


def test_bad_requests_and_unknown_faults_are_400(stub):
    _, client = stub
    r = client.post("/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "no records"}]})
    assert r.status_code == 400 and "</records>" in r.json()["error"]["message"]
    r = client.post("/chat/completions", json=batch_body(works("FAULT:malformd")))
    assert r.status_code == 400 and "unknown FAULT mode 'malformd'" in r.json()["error"]["message"]


def test_burst_429_and_stats():
    with run_stub(burst_429=2) as (base_url, _), httpx.Client(base_url=base_url, timeout=10) as client:
        body = batch_body(works("a", "b", "c"))
        first = [client.post("/chat/completions", json=body) for _ in range(4)]
        assert [r.status_code for r in first] == [429, 429, 200, 200]
        assert first[0].headers["retry-after"] == "0"
        s = stats(client, base_url)
        assert s["calls"] == 4 and s["works"] == 6 and s["status"]["429"] == 2 and s["status"]["200"] == 2


def test_fail_status_answers_every_chat_call_and_a_stub_starts_again_on_its_port():
    """``fail_status``: every chat call gets that status (503 with Retry-After 0), /v1/models still answers;
    ``port``: a stub killed with SIGKILL can be started again where it listened (a lane that comes back)."""
    with run_stub(fail_status=503) as (base_url, proc), httpx.Client(base_url=base_url, timeout=10) as client:
        r = client.post("/chat/completions", json=batch_body(works("a")))
        assert r.status_code == 503 and r.headers["retry-after"] == "0" and "fail-status 503" in r.text
        assert client.get("/models").status_code == 200
        s = stats(client, base_url)
        assert s["calls"] == 1 and s["works"] == 0 and s["status"]["fail_status"] == 1
        port = httpx.URL(base_url).port
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with run_stub(port=port) as (again, _):
        assert again == base_url
        assert httpx.post(f"{again}/chat/completions", json=batch_body(works("a")), timeout=10).status_code == 200


def test_json_schema_rejection_for_the_fallback():
    with run_stub(reject_json_schema=True) as (base_url, _), httpx.Client(base_url=base_url, timeout=10) as client:
        recs = works("a")
        r = client.post(
            "/chat/completions", json=batch_body(recs, response_format={"type": "json_schema", "json_schema": {}})
        )
        assert r.status_code == 400 and r.json()["error"]["message"] == JSON_SCHEMA_REJECTED
        r = client.post(
            "/chat/completions", json=batch_body(recs, response_format={"type": "json_object", "schema": {}})
        )
        assert r.status_code == 200


def test_two_workers_share_the_429_burst_and_the_counters():
    with run_stub(workers=2, burst_429=3) as (base_url, _):
        codes = []
        for _ in range(8):  # a fresh connection each time, so both workers take calls
            codes.append(
                httpx.post(f"{base_url}/chat/completions", json=batch_body(works("a", "b")), timeout=10).status_code
            )
        assert codes.count(429) == 3 and codes.count(200) == 5
        s = httpx.get(base_url.removesuffix("/v1") + "/stats").json()
        assert s["calls"] == 8 and s["works"] == 10 and s["workers_started"] == 2


def test_the_stub_can_be_killed_mid_call():
    with run_stub(latency_ms=3000) as (base_url, proc):
        with httpx.Client(base_url=base_url, timeout=10) as client:
            t0 = time.monotonic()
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(1) as ex:
                pending = ex.submit(client.post, "/chat/completions", json=batch_body(works("a")))
                time.sleep(0.5)  # the call is now sleeping in the stub
                os.kill(proc.pid, signal.SIGKILL)
                with pytest.raises(httpx.TransportError):
                    pending.result()
            assert time.monotonic() - t0 < 3
        assert proc.wait(timeout=5) == -signal.SIGKILL
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base_url}/models", timeout=2)
    # leaving the block after the kill is clean (no exception, nothing left running)
