r"""The run loop: one controller owns time, saving, trackers and the progress bar.

A solver is a :class:`Stepper`: it only knows how to advance a state from one
save time to the next.  The loop

1. walks the save times :math:`t_k = t_0 + k\,\Delta t_{\mathrm{save}}` (the last one clipped
   to ``t_final``),
2. asks the stepper to advance the state exactly to each of them,
3. hands every saved frame to the trackers (energy, sphere constraint, NaN,
   steady state, W2 to a target, …) and to the writer, which appends it to
   disk at once,
4. stops when a tracker says so, keeping the reason in ``info["stop_reason"]``.

Because the steps inside a save interval depend only on the interval, a run
resumed from its last saved frame reproduces the uninterrupted run bit for bit.
"""
from __future__ import annotations

import decimal
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from meanfield.errors import RunFailed, StorageFailed, TrackerError
from meanfield.solvers.signals import Interrupted, check

__all__ = [
    "RunSetup",
    "Stepper",
    "Tracker",
    "StopRun",
    "RunResult",
    "save_times",
    "run_loop",
]


class Stepper(Protocol):
    """What the loop needs from a solver."""

    def advance(self, state: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Integrate the state from ``t0`` to exactly ``t1`` and return it."""
        ...


class StopRun(Exception):
    """Raised by a tracker to end the run; ``failed`` runs exit with status 1.  ``values``: what the tracker
    measured on the frame that stopped the run, recorded with it.  ``bad_state``: the frame itself failed the
    tracker's check (NaN, tokens off the sphere, negative mass, …) and is not committed (``failed`` with it)."""

    def __init__(self, reason: str, *, failed: bool = False, values: dict[str, float] | None = None, bad_state: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.failed = failed or bad_state
        self.values = dict(values or {})
        self.bad_state = bad_state


class Tracker(Protocol):
    """Looks at every saved frame; may record scalars and may raise :class:`StopRun`."""

    name: str

    def __call__(self, t: float, state: np.ndarray) -> dict[str, float] | None: ...


@dataclass(frozen=True)
class RunResult:
    """Frozen outcome of a run.

    Attributes
    ----------
    t : (T,) array
        Saved times (only those of this call when the run was resumed with ``keep_history=False``).
    states : list of arrays
        Saved states, or an empty list when the writer kept them on disk only.
    diagnostics : dict of (T,) arrays
        Scalars recorded by the trackers at each saved frame.
    info : dict
        ``steps`` (save intervals done), ``wall_time``, ``stop_reason``, ``failed``.
    """

    t: np.ndarray
    states: list[np.ndarray]
    diagnostics: dict[str, np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> np.ndarray:
        return self.states[-1]


@dataclass
class RunSetup:
    """Everything the loop needs for one run, as a solver builds it.

    Attributes
    ----------
    model : Model-like
        The vector field (for summaries and trackers).
    stepper : Stepper
    state : array
        The state at the first save time: tokens ``(n, d)`` or cell masses ``(N,)``.
    state_name : {"x", "mass"}
        The HDF5 dataset the states go to.
    static : dict of arrays
        Arrays written once (``points``, ``areas``, the weight path …).
    trackers : list of Tracker
    info : callable
        Returns the stepper's counters once the run is over.
    """

    model: Any
    stepper: Any
    state: np.ndarray
    state_name: str
    static: dict[str, np.ndarray] = field(default_factory=dict)
    trackers: list[Any] = field(default_factory=list)
    info: Callable[[], dict[str, Any]] = dict


def _decimal_times(t_start: float, save_every: float, count: int) -> np.ndarray | None:
    """``t_start + k save_every`` (k = 0 … count) as the doubles nearest the decimals, or ``None`` where the two are
    no short decimals (more than 15 places) or the times need more than 53 bits at that many places."""
    if not (math.isfinite(t_start) and math.isfinite(save_every)):
        return None
    start_decimal, step_decimal = (decimal.Decimal(repr(float(v))) for v in (t_start, save_every))
    # the decimal places of the reprs (0.1: 1, 2.0: 1, 1e-05: 5, 1/3: 16; 0 for an integer 1e+16)
    places = max(0, -int(start_decimal.as_tuple().exponent), -int(step_decimal.as_tuple().exponent))
    if places > 15:
        return None
    scale = 10**places
    start = int(start_decimal.scaleb(places))  # exact: places covers every digit
    step = int(step_decimal.scaleb(places))
    if max(abs(start), abs(start + count * step)) >= 2**53:
        return None
    # integers below 2^53 are exact doubles, and an exact double over an exact power of ten rounds once: the nearest
    return (start + step * np.arange(count + 1, dtype=np.int64)).astype(np.float64) / float(scale)


def save_times(t_start: float, t_final: float, save_every: float) -> np.ndarray:
    r"""Save times :math:`t_0 + k\,\Delta`, clipped to ``t_final`` (which is always included).

    Computed from integers so that a resumed run sees the same floats.  Where ``t_start`` and
    ``save_every`` are short decimals (p ≤ 15 places in their ``repr``), time k is the integer
    :math:`10^p t_0 + k\,10^p\Delta` over :math:`10^p`, the double nearest the decimal: ``save_every = 0.1``
    gives 0.3, not the float sum 0.30000000000000004, so ``run.t == 0.3`` finds its frame (otherwise,
    e.g. ``save_every = 1/3``, :math:`t_0 + k\Delta`).  A ``t_final`` within a
    millionth of the interval of the last save time replaces it rather than adding a frame
    (a float32 ``t_final = 0.3`` is 0.30000001: it had added a frame 1.2e-8 after the one at 0.3).  The first save
    time is never replaced: a ``t_final`` that close to ``t_start`` follows it (``t_final = 1e-12`` had relabelled the
    initial state as the frame at t = 1e-12, with no frame at t = 0 and no step taken).
    """
    if save_every <= 0:
        raise ValueError("save_every must be positive")
    count = int(math.floor((t_final - t_start) / save_every + 1e-9))
    times = _decimal_times(t_start, save_every, count)
    if times is None:
        times = t_start + save_every * np.arange(count + 1)
    times = np.minimum(times, t_final)
    if t_final - times[-1] > max(1e-9 * max(1.0, abs(t_final)), 1e-6 * save_every) or (len(times) == 1 and t_final > times[0]):
        times = np.append(times, t_final)
    else:
        times[-1] = t_final  # within round-off of t_final: land on it exactly
    return times


def run_loop(
    stepper: Stepper,
    state: np.ndarray,
    times: Sequence[float],
    *,
    trackers: Sequence[Tracker] = (),
    write: Callable[[float, np.ndarray, dict[str, float]], None] | None = None,
    progress: Any = None,
    keep_states: bool = True,
    record_first: bool = True,
) -> RunResult:
    """Drive ``stepper`` through the save ``times`` (``times[0]`` is the state's time).

    Parameters
    ----------
    stepper : Stepper
    state : array
        State at ``times[0]``.
    times : sequence of float
        Save times, increasing.
    trackers : sequence of Tracker
        Called on every saved frame, in order; the scalars they return are
        merged into the frame's diagnostics.
    write : callable, optional
        ``write(t, state, diagnostics)`` appends one frame to storage.
    progress : tqdm-like, optional
        Updated by the simulated time of each interval.
    keep_states : bool
        Keep the saved states in memory (``False`` for long runs on disk).
    record_first : bool
        Save and track the frame at ``times[0]`` (``False`` when resuming:
        it is already on disk).
    """
    started = time.perf_counter()
    saved_t: list[float] = []
    saved: list[np.ndarray] = []
    diags: dict[str, list[float]] = {}
    stop_reason = "t_final"
    failed = False
    interrupted = False
    storage_failed = False
    tracker_error: TrackerError | None = None

    def record(t: float, current: np.ndarray) -> None:
        values: dict[str, float] = {}
        error: StopRun | None = None
        owner: dict[str, Any] = {}  # the tracker that recorded each name

        def taken_by_another(tracker: Any, recorded: Mapping[str, float]) -> None:
            if not getattr(tracker, "from_caller", False) or recorded.keys().isdisjoint(values):
                return
            # a built-in tracker that yields gives way (G² of time-dependent heads, which a caller's tracker may record)
            taken = sorted(k for k in set(recorded).intersection(values) if not getattr(owner[k], "yields_to_caller", False))
            if taken:
                first = {id(owner[k]): owner[k] for k in taken}.values()
                earlier = next(iter(first))
                by = (f"the tracker {earlier.name!r} before it records" if len(first) == 1 and getattr(earlier, "from_caller", False)
                      else "the run's own trackers record")
                raise TrackerError(f"the tracker {tracker.name!r} at t={t:.6g} returns {', '.join(map(repr, taken))}, which {by}; "
                                   "give its values other names")

        for tracker in trackers:
            try:
                recorded = tracker(t, current) or {}
                taken_by_another(tracker, recorded)
                values.update(recorded)
                owner.update(dict.fromkeys(recorded, tracker))
            except StopRun as exc:  # keep the frame, then stop; a run that ends well (steady state) still gets the
                taken_by_another(tracker, exc.values)  # (a caller's StopRun had replaced the run's own energy)
                values.update(exc.values)  # values of the trackers after the one that stopped it (the energy follows the speed)
                owner.update(dict.fromkeys(exc.values, tracker))
                error = error or exc
                if exc.failed:
                    break
            except ArithmeticError as exc:  # a diagnostic overflowed: the run's numbers are out of range
                name = getattr(tracker, "name", type(tracker).__name__)
                error = StopRun(f"{type(exc).__name__} in the {name} tracker at t={t:.6g} ({exc}): the run's numbers "
                                "are out of floating-point range (β too large for this solver?)", failed=True)
                break
        if error is not None and error.bad_state:  # a frame that failed its checks (NaN, off the sphere, …) is not committed:
            raise error  # the file keeps the good frames before it, which every reader can take
        saved_t.append(t)
        if keep_states:
            saved.append(np.array(current, copy=True))
        for key, value in values.items():
            diags.setdefault(key, [math.nan] * (len(saved_t) - 1)).append(value)
        for key, series in diags.items():
            if len(series) < len(saved_t):
                series.append(math.nan)
        if write is not None:
            write(t, current, values)
        if error is not None:
            raise error

    steps = 0
    try:
        if record_first:
            record(float(times[0]), state)
        for t0, t1 in zip(times[:-1], times[1:]):
            check()
            state = stepper.advance(state, float(t0), float(t1))
            steps += 1
            if progress is not None:
                progress.update(float(t1) - float(t0))
            record(float(t1), state)
    except StopRun as exc:
        stop_reason = exc.reason
        failed = exc.failed
    except Interrupted as exc:  # a signal: the frames so far stay, the run can be resumed
        stop_reason = exc.reason
        interrupted = True
    except TrackerError as exc:  # a caller's tracker: the run stops as failed, its frames kept (the caller re-raises it)
        stop_reason, failed, tracker_error = str(exc), True, exc
    except StorageFailed as exc:  # the writer could not put the frame on disk: say exactly that
        stop_reason = str(exc)
        failed = storage_failed = True
    except (RunFailed, ArithmeticError) as exc:  # the stepper itself gave up (NaN, overflow, step size, positivity)
        stop_reason = f"solver failed after t={saved_t[-1] if saved_t else times[0]:.6g}: {exc}"
        failed = True
    return RunResult(
        t=np.asarray(saved_t),
        states=saved,
        diagnostics={k: np.asarray(v) for k, v in diags.items()},
        info={
            "steps": steps,
            "wall_time": time.perf_counter() - started,
            "stop_reason": stop_reason,
            "failed": failed,
            "interrupted": interrupted,
            "storage_failed": storage_failed,  # the frames on disk are good: --resume continues once there is room
            **({"tracker_error": tracker_error} if tracker_error is not None else {}),  # an object: not written to files
        },
    )
