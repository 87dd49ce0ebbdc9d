"""Tests of metacan_pipeline.http: the Retry-After rule."""


def test_retry_after_dates_and_caps():
    from metacan_pipeline.http import MAX_RETRY_AFTER_S, retry_after_seconds

    assert retry_after_seconds("7") == 7.0 and retry_after_seconds("86400") == MAX_RETRY_AFTER_S
    assert retry_after_seconds("nan") is None and retry_after_seconds("soon") is None
    assert 0 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") <= 1  # a past date: retry now
    assert retry_after_seconds("86400", cap_s=30.0) == 30.0  # a client may cap lower, never higher
    assert retry_after_seconds("86400", cap_s=1e9) == MAX_RETRY_AFTER_S
