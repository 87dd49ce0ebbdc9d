"""How a teacher step (labelling, qualification) is retried: a failure is tried again, an interrupt stops the run."""

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import duckdb

#: A teacher step that fails (a server gone, a full disk) is tried again up to twice, 0-10 s then 10-20 s later. Not as
#: the assets' ``retry_policy``: Dagster's RetryPolicy retries an interrupted step too, so a run sent SIGTERM (or
#: Ctrl-C, or terminated in the UI) would go on labelling. The steps raise ``RetryRequested`` themselves instead
#: (:func:`retried_unless_interrupted`), and an interrupt stops the run.
_TEACHER_RETRY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@contextmanager
def retried_unless_interrupted(retry_number: int) -> Iterator[None]:
    """Turn an exception of the step's body into ``RetryRequested`` as :data:`_TEACHER_RETRY` would after attempt
    ``retry_number`` (the context's: 0 the first time) (a
    ``dg.Failure`` with ``allow_retries=False`` is not retried); an interrupt (``KeyboardInterrupt``, Dagster's
    ``DagsterExecutionInterruptedError``: BaseExceptions; and DuckDB's ``InterruptException``, raised as a
    ``KeyboardInterrupt``, which a signal during a query becomes) passes through and stops the run. Labels stored before
    either are kept: a re-run reuses them."""
    try:
        yield
    except duckdb.InterruptException as exc:  # DuckDB's form of a signal that landed during one of its queries
        raise KeyboardInterrupt from exc
    except dg.Failure as failure:
        if not failure.allow_retries:
            raise
        if _interrupted(failure):
            raise KeyboardInterrupt from failure
        raise _retry(retry_number) from failure
    except Exception as exc:
        if _interrupted(exc):
            raise KeyboardInterrupt from exc
        raise _retry(retry_number) from exc


def _interrupted(exc: BaseException) -> bool:
    """Whether an exception was caused by an interrupt: one in its chain of causes and contexts (DuckDB turns an
    interrupt during a query into ``RuntimeError('Query interrupted')`` whose context is the interrupt), or DuckDB's
    own sentence for it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (KeyboardInterrupt, dg.DagsterExecutionInterruptedError, duckdb.InterruptException)):
            return True
        if isinstance(current, RuntimeError) and str(current) == "Query interrupted":
            return True
        current = current.__cause__ or current.__context__
    return False


def _retry(retry_number: int) -> dg.RetryRequested:
    return dg.RetryRequested(
        max_retries=_TEACHER_RETRY.max_retries, seconds_to_wait=_TEACHER_RETRY.calculate_delay(retry_number + 1)
    )
