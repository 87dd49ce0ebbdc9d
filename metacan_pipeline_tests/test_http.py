"""Tests of metacan_pipeline.http: the Retry-After rule and the public form of a URL."""


def test_retry_after_dates_and_caps():
    from metacan_pipeline.http import MAX_RETRY_AFTER_S, retry_after_seconds

    assert retry_after_seconds("7") == 7.0 and retry_after_seconds("86400") == MAX_RETRY_AFTER_S
    assert retry_after_seconds("nan") is None and retry_after_seconds("soon") is None
    assert 0 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") <= 1  # a past date: retry now
    assert retry_after_seconds("86400", cap_s=30.0) == 30.0  # a client may cap lower, never higher
    assert retry_after_seconds("86400", cap_s=1e9) == MAX_RETRY_AFTER_S


def test_public_url_drops_credentials_query_and_fragment():
    """What teacher_calls.endpoint and the log show of a base URL: never a key in user info or a query."""
    from metacan_pipeline.http import public_url

    assert public_url("http://user:sk-1@gpu1:8000/v1/?api_key=sk-2#x") == "http://gpu1:8000/v1"
    assert public_url("https://api.openai.com/v1") == "https://api.openai.com/v1"
    assert public_url("http://[::1]:9000/v1") == "http://[::1]:9000/v1"
