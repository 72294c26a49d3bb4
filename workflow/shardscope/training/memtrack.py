"""A tensor-level memory tracker for one untimed training step (CPU and GPU alike).

Why not the process RSS: on CPU it counts the interpreter, libraries and the allocator's
cache (446 MB for a model holding 8 MB), so it cannot be compared with a model of tensors.
This tracker sees every tensor an operator creates (a ``TorchDispatchMode``), follows the
storage behind it with a weak reference (its death is the free), and polls each live
storage's size after every operator (FSDP2 resizes its unsharded parameters in place).

After the step every storage it saw is put in one category:

``state``
    parameters, gradients and optimizer state as held after backward (the storages that
    :func:`shardscope.training.held_bytes.held_bytes_and_storages` finds then); counted by
    :mod:`held_bytes`, not here.
``activations``
    created during forward, alive when forward returned, and not backing a module parameter
    then: what autograd saved for backward (and the loss); under activation checkpointing also
    what backward creates while it recomputes a block (:func:`shardscope.training.checkpointing.in_recompute`):
    the block's activations, made late, unless it backs a parameter when the recompute ends
    (gathered again for it; :meth:`TensorMemoryTracker.mark_recompute_params`).
``buffers``
    everything else: gathered parameters (FSDP, ZeRO-3; a storage resized to or from 0 in place
    is one, even where autograd saved a view of it), communication buckets, gradients of
    activations during backward, the optimizer step's temporaries.

Checked against torch's own instruments (:mod:`shardscope.training.reference_peaks`,
``benchmarks/instruments.py``): at world size 1 the peak agrees with the CPU allocator's events
from the profiler and with ``MemTracker`` (DDP) / ``FSDPMemTracker`` (FSDP2) within 1% (tested).
Why a tracker of our own at all: DeepSpeed. ``MemTracker`` files memory as parameters, gradients
and optimizer state by torch's roles (``module.parameters()``, ``param.grad``,
``optimizer.state``); ZeRO keeps its parameter partitions, reduced gradient partitions and fp32
master weights in attributes of its engine and optimizer, which ``MemTracker`` would count as
other memory. This tracker takes the state from :mod:`shardscope.training.held_bytes`, which knows
those attributes, so every strategy is measured by one instrument.

Storages are told apart by identity (the storage object itself), never by address: the
allocator hands a freed storage's address to the next one (FSDP2 frees the root's unsharded
parameters at the end of backward, and the sharded gradients it then allocates may land at the
address those parameters had when forward gathered them), so an address says nothing about
which storage a remembered one was.

A storage whose last reference goes on another thread (gloo runs each collective on its own
worker thread, and that thread's hold on the collective's tensors may outlast the caller's) dies,
for the tracker, when the last collective that used it completed: the caller has let go of it
by then (otherwise the caller's own release would be the last), and the collective's reference
ends with the collective, so this is the one moment that does not depend on how the two threads
were scheduled.

Time is counted in operators, and each operator count ``N`` has three moments in this order:
sizes that a poll inside operator ``N`` noticed (a storage resized in place since operator
``N-1`` returned), then the outputs of operator ``N`` born, then what was released after it
returned (autograd lets go of a backward function's inputs only after the function has made
its outputs) and sizes noticed outside any operator. So an operator's output and the inputs it
was made from are alive together, as they are in the allocator: the gradient of the logits at
the start of backward is made while the gradient it is computed from is still alive, and
torch's profiler sees both (a tracker that summed each operator count's changes at once saw
one of them, and its peak was one logits-sized tensor under the profiler's).

The step's transient peak is the largest ``activations + buffers`` alive at once; the
reported peak is ``state + transient peak`` (gradients counted throughout, as they are under
gradient accumulation). Memory a kernel allocates below the dispatcher (a workspace inside
one operator) is not seen: the numbers are *tracked tensor memory*.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

PHASES = ("forward", "backward", "step")
#: The moments of one operator count, in order (module docstring): resized before it returned, born of it, released after it.
RESIZED, BORN, RELEASED = 0, 1, 2
Moment = tuple[int, int]


@dataclass(frozen=True)
class TrackedStep:
    """One rank's tracked bytes of one step, by category (see the module docstring)."""

    activation_bytes: int
    """Activations alive at the step's transient peak."""
    buffer_bytes: int
    """Buffers alive at the step's transient peak."""
    transient_peak_bytes: int
    """Largest ``activations + buffers`` alive at once during the step."""
    activation_peak_bytes: int
    """Largest activations alive at any moment (at the end of forward, normally)."""
    forward_buffer_peak_bytes: int
    """Largest buffers alive at once during forward (gathered parameters, casts)."""
    peak_phase: str
    """Phase (forward, backward, step) in which the transient peak happened."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary, as stored in the job's result file."""
        return asdict(self)


class _Storage:
    __slots__ = ("ref", "phase", "born", "died", "sizes", "state", "recomputed", "param", "collective", "origin")

    def __init__(self, ref: weakref.ref, phase: str, born: int, nbytes: int, recomputed: bool = False,
                 origin: Any = None) -> None:
        self.ref, self.phase, self.born, self.died = ref, phase, born, None
        self.origin = origin  # (operator, shape, dtype) that created it; only kept when the live set is asked for
        self.sizes: list[tuple[Moment, int]] = [((born, BORN), nbytes)]
        self.state = False
        self.recomputed = recomputed
        self.param = False  # backed a parameter when a recompute ended (gathered again for it)
        self.collective: int | None = None  # the operator count when the last collective that used it returned


class _Identities:
    """A set of storages by identity that keeps none of them alive (an id is only trusted while its object lives)."""

    def __init__(self, storages: Iterable[torch.UntypedStorage] = ()) -> None:
        self._refs = {id(s): weakref.ref(s) for s in storages}

    def __contains__(self, storage: object) -> bool:
        ref = self._refs.get(id(storage))
        return ref is not None and ref() is storage


class TensorMemoryTracker(TorchDispatchMode):
    """Records each storage's life (birth, size changes, death) in operator counts during a step.

    Use as a context manager around forward, backward and the optimizer step, calling
    :meth:`phase` at each boundary and :meth:`mark_forward_end` when forward returns.
    """

    def __init__(self, keep_origins: bool = False) -> None:
        super().__init__()
        self._keep_origins = keep_origins  # a debug aid (:meth:`live_at_peak`); off in the worker's normal runs
        self._funcs: dict[int, str] = {}  # operator count -> operator, kept with the origins
        self._op = 0
        self._phase = "forward"
        self._by_id: dict[int, _Storage] = {}
        self._live: dict[int, _Storage] = {}
        self._forward_end_records: set[int] = set()
        self._params_at_forward_end: set[int] = set()
        self._state = _Identities()
        self._phase_starts: dict[str, int] = {"forward": 0}
        self._thread: int | None = None

    def __enter__(self) -> TensorMemoryTracker:
        self._thread = threading.get_ident()
        return super().__enter__()

    def phase(self, name: str) -> None:
        """Start phase ``name`` (``backward`` or ``step``)."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; expected one of {', '.join(PHASES)}")
        self._poll()
        self._phase = name
        self._phase_starts[name] = self._op

    def mark_forward_end(self, params: Iterable[torch.UntypedStorage]) -> None:
        """Forward has returned: remember what is alive, and which of those storages back parameters now."""
        self._poll()
        self._forward_end_records = {id(record) for record in self._live.values()}
        params = _Identities(params)
        self._params_at_forward_end = {id(record) for record in self._live.values() if record.ref() in params}

    def mark_recompute_params(self, params: Iterable[torch.UntypedStorage]) -> None:
        """A recompute has ended: the live storages it created that back parameters now are gathered parameters, not activations.

        Decided by the storages alive now (ZeRO-3 gathers a released parameter again for the
        recompute); a recomputed activation is never one of them, wherever the allocator put it.
        """
        params = _Identities(params)
        for record in self._live.values():
            if record.recomputed and record.ref() in params:
                record.param = True

    def set_state(self, storages: Iterable[torch.UntypedStorage]) -> None:
        """The storages of parameters, gradients and optimizer state after backward (the very objects, not their addresses)."""
        self._poll()
        self._state = _Identities(storages)
        for record in self._live.values():
            if record.ref() in self._state:
                record.state = True

    def _register(self, storage: torch.UntypedStorage, origin: Any = None) -> None:
        key = id(storage)
        if key in self._live:
            return
        try:
            storage.data_ptr()
        except RuntimeError:  # a wrapper subclass's (DTensor's) placeholder storage holds no memory
            return
        from shardscope.training.checkpointing import in_recompute

        record = _Storage(weakref.ref(storage, self._dead_callback(key)), self._phase, self._op, storage.nbytes(),
                          recomputed=self._phase == "backward" and in_recompute(), origin=origin)
        # A storage first seen after backward but held as state (an optimizer moment updated in
        # place in the step) is state, not a step temporary.
        record.state = storage in self._state
        self._by_id[len(self._by_id)] = record
        self._live[key] = record

    def _dead_callback(self, key: int) -> Callable[[weakref.ref], None]:
        def dead(_: weakref.ref) -> None:
            record = self._live.pop(key, None)
            if record is None:
                return
            elsewhere = self._thread is not None and threading.get_ident() != self._thread
            # released by a communication thread: when the last collective that used it completed (module docstring)
            record.died = max(record.collective, record.born) if elsewhere and record.collective is not None else self._op
        return dead

    def _poll(self, inside_op: bool = False) -> None:
        """Note size changes of live storages (resized in place, outside any operator).

        ``inside_op``: polled right after an operator returned, so the change happened before
        its outputs were made (moment ``RESIZED``); otherwise after the last operator (``RELEASED``).
        """
        moment = (self._op, RESIZED if inside_op else RELEASED)
        for record in list(self._live.values()):
            storage = record.ref()
            if storage is None:
                continue
            nbytes = storage.nbytes()
            if nbytes != record.sizes[-1][1]:
                record.sizes.append((moment, nbytes))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self._op += 1
        if self._keep_origins:
            self._funcs[self._op] = str(func)
            for leaf in tree_leaves(out):
                for storage in _storages(leaf):
                    self._register(storage, (str(func), tuple(leaf.shape), str(leaf.dtype).removeprefix("torch.")))
        else:
            for storage in _storages(out):
                self._register(storage)
        if getattr(func, "namespace", None) == "c10d":  # a collective: it holds its tensors until it completes
            for storage in _storages((args, kwargs, out)):
                record = self._live.get(id(storage))
                if record is not None:
                    record.collective = self._op
        self._poll(inside_op=True)
        return out

    def result(self) -> TrackedStep:
        """Sweep the recorded lives: the transient peak and what it is made of."""
        self._poll()
        return self._sweep()

    def live_at_peak(self) -> list[dict[str, Any]]:
        """Every non-state storage alive at the transient peak, largest first: a debug aid, for finding what a memory term misses.

        Each entry: category, bytes then, the phase it was born in and its operator count, and
        (when the tracker was made with ``keep_origins``) the operator, shape and dtype that made it.
        """
        self._poll()
        peak = self._scan(self._events())[1]
        live = []
        for record in self._by_id.values():
            category = self._classify(record)
            if category == "state" or (record.born, BORN) > peak or (record.died is not None and (record.died, RELEASED) <= peak):
                continue
            nbytes = [size for moment, size in record.sizes if moment <= peak][-1]
            if nbytes:
                op, shape, dtype = record.origin or (None, None, None)
                live.append({"category": category, "bytes": nbytes, "phase": record.phase, "born": record.born,
                             "recomputed": record.recomputed, "op": op, "shape": shape, "dtype": dtype})
        return sorted(live, key=lambda entry: -entry["bytes"])

    def timeline(self, around: int = 40) -> list[dict[str, Any]]:
        """A debug aid: ``around`` operators either side of the transient peak, each with the bytes alive after it by category.

        Each entry: the operator count, the operator (with ``keep_origins``), activations,
        buffers, and the shapes of the storages born (``+``) and freed (``-``) at it.
        """
        self._poll()
        events = self._events()
        peak_op = self._scan(events)[1][0]
        current, out = {"activations": 0, "buffers": 0}, []
        for moment in sorted(events):
            for category, delta, _ in events[moment]:
                current[category] += delta
            op = moment[0]
            if abs(op - peak_op) <= around:
                changes = [f"{'+' if d > 0 else '-'}{c[0]}{str(r.origin[1]) if r.origin else '?'}"
                           for c, d, r in events[moment] if d]
                out.append({"op": op, "moment": ("resized", "born", "released")[moment[1]],
                            "func": self._funcs.get(op), **current, "changes": " ".join(changes)})
        return out

    def _sweep(self) -> TrackedStep:
        return self._scan(self._events())[0]

    def _events(self) -> dict[Moment, list[tuple[str, int, _Storage]]]:
        """Moment -> each non-state storage's change in bytes then (born, resized, freed), with its category."""
        events: dict[Moment, list[tuple[str, int, _Storage]]] = {}
        for record in self._by_id.values():
            category = self._classify(record)
            if category == "state":
                continue
            previous = 0
            for moment, nbytes in record.sizes:
                events.setdefault(moment, []).append((category, nbytes - previous, record))
                previous = nbytes
            if record.died is not None:
                events.setdefault((record.died, RELEASED), []).append((category, -previous, record))
        return events

    def _scan(self, events: dict[Moment, list[tuple[str, int, _Storage]]]) -> tuple[TrackedStep, Moment]:
        """The step's peaks from :meth:`_events`, and the moment of the transient peak."""
        current = {"activations": 0, "buffers": 0}
        best, best_op = (-1, 0, 0, "forward"), (0, BORN)
        act_peak = 0
        fwd_buf_peak = 0
        backward_start = self._phase_starts.get("backward", self._op + 1)
        for moment in sorted(events):
            for category, delta, _ in events[moment]:
                current[category] += delta
            op = moment[0]
            total = current["activations"] + current["buffers"]
            act_peak = max(act_peak, current["activations"])
            if op < backward_start:
                fwd_buf_peak = max(fwd_buf_peak, current["buffers"])
            if total > best[0]:
                best = (total, current["activations"], current["buffers"], self._phase_at(op))
                best_op = moment
        total, act, buf, phase = best
        return TrackedStep(activation_bytes=act, buffer_bytes=buf, transient_peak_bytes=max(total, 0),
                           activation_peak_bytes=act_peak, forward_buffer_peak_bytes=fwd_buf_peak,
                           peak_phase=phase), best_op

    def _classify(self, record: _Storage) -> str:
        if record.state:
            return "state"
        if any(nbytes == 0 for _, nbytes in record.sizes):
            return "buffers"  # resized in place: an unsharded parameter that FSDP frees and re-gathers
        if record.recomputed:  # a checkpointed block's activations, recomputed in backward, unless a parameter gathered for it
            return "buffers" if record.param else "activations"
        alive_at_forward_end = record.phase == "forward" and id(record) in self._forward_end_records
        if alive_at_forward_end and id(record) not in self._params_at_forward_end:
            return "activations"
        return "buffers"

    def _phase_at(self, op: int) -> str:
        name = "forward"
        for phase in PHASES:
            start = self._phase_starts.get(phase)
            if start is not None and op >= start:
                name = phase
        return name


def _storages(tree: Any) -> Iterator[torch.UntypedStorage]:
    """The storage behind every real tensor in ``tree`` (meta tensors and storage-less subclasses skipped)."""
    for leaf in tree_leaves(tree):
        if isinstance(leaf, torch.Tensor) and not getattr(leaf, "is_meta", False):
            try:
                yield leaf.untyped_storage()
            except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
                continue


def decoder_of(module: torch.nn.Module) -> torch.nn.Module:
    """The :class:`GPT` inside whatever wraps it (DDP's ``module``, DeepSpeed's engine, FSDP2 in place)."""
    for sub in module.modules():
        if hasattr(sub, "blocks") and hasattr(sub, "head"):
            return sub
    raise TypeError(f"no decoder with blocks inside {type(module).__name__}")


def param_storages(module: torch.nn.Module) -> list[torch.UntypedStorage]:
    """The storages behind the module's parameters as they are now (gathered or not)."""
    from shardscope.training.held_bytes import local_tensor, model_param_tensors

    return [local_tensor(t).untyped_storage() for t in model_param_tensors(module)]


def tracked_step(prepared: Any, tokens: torch.Tensor) -> tuple[TrackedStep, Any]:
    """One untimed training step under the tracker; returns its categories and the state held after backward.

    Runs outside the timed loop (the tracker slows every operator), so step times are not
    distorted. Forward's end is found with a forward hook on the decoder, registered for this
    step only. A debug aid: with ``SHARDSCOPE_TRACKER_LIVE=DIR`` set, each rank writes what is
    alive at its peak (:meth:`TensorMemoryTracker.live_at_peak`) to ``DIR/live-rank<N>.json``.
    """
    from shardscope.training.held_bytes import held_bytes_and_storages

    live_dir = os.environ.get("SHARDSCOPE_TRACKER_LIVE")
    tracker = TensorMemoryTracker(keep_origins=bool(live_dir))
    decoder = decoder_of(prepared.model)

    def forward_done(*_: Any) -> None:
        tracker.mark_forward_end(param_storages(decoder))
        tracker.phase("backward")

    from shardscope.training.checkpointing import on_recompute_end

    handle = decoder.register_forward_hook(forward_done)
    stop_listening = on_recompute_end(lambda: tracker.mark_recompute_params(param_storages(decoder)))
    try:
        with tracker:
            prepared.forward_backward(tokens)
            held, storages = held_bytes_and_storages(prepared.model, prepared.optimizer)
            tracker.set_state(storages)
            tracker.phase("step")
            prepared.step()
    finally:
        handle.remove()
        stop_listening()
    if live_dir:
        _write_live_set(Path(live_dir), tracker)
    return tracker.result(), held


def _write_live_set(folder: Path, tracker: TensorMemoryTracker) -> None:
    """This rank's live set at its peak, with the totals by category, as JSON (see :func:`tracked_step`)."""
    import json

    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    folder.mkdir(parents=True, exist_ok=True)
    live = tracker.live_at_peak()
    totals = {c: sum(e["bytes"] for e in live if e["category"] == c) for c in ("activations", "buffers")}
    (folder / f"live-rank{rank}.json").write_text(json.dumps({"totals": totals, "result": tracker.result().to_dict(),
                                                             "live": live, "timeline": tracker.timeline()}, indent=1))


def step_peak_bytes(ctx: Any) -> int | None:
    """After a timed step: CUDA's ``max_memory_allocated`` so far (the high-water mark up to this step); None on CPU.

    A read of the allocator's counter, no synchronisation and no reset, so it costs the timed loop
    nothing; on CPU no per-step figure exists (the tensor tracker runs on one untimed step only).
    """
    return int(torch.cuda.max_memory_allocated(ctx.device)) if ctx.is_cuda else None


def largest_rank_bytes(values: list[int | None], ctx: Any) -> list[int | None]:
    """Per step, the largest rank's value of :func:`step_peak_bytes` (one collective after the loop); Nones on CPU."""
    if not ctx.is_cuda or not values:
        return [None] * len(values)
    import torch.distributed as dist

    peaks = torch.tensor(values, dtype=torch.int64, device=ctx.device)
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    return [int(v) for v in peaks.cpu()]


def measured_peak(ctx: Any) -> dict[str, Any]:
    """This rank's measured peak since the last reset: on a GPU, CUDA's own (allocated and reserved), else the RSS.

    ``peak_memory_bytes`` is ``torch.cuda.max_memory_allocated`` (method ``cuda_max_allocated``),
    the bytes tensors held at the worst moment; ``peak_memory_reserved_bytes`` is
    ``torch.cuda.max_memory_reserved``, what the caching allocator had taken from the device then
    (tensors plus its cache and fragmentation: what must fit the GPU). On CPU the peak is the
    process's RSS high-water mark and reserved is null (the tensor tracker's peak is the CPU figure).
    """
    from shardscope.device import peak_memory_bytes

    peak, method = peak_memory_bytes(ctx)
    reserved = int(torch.cuda.max_memory_reserved(ctx.device)) if ctx.is_cuda else None
    return {"peak_memory_bytes": peak, "peak_memory_method": method, "peak_memory_reserved_bytes": reserved}


def cuda_memory_counters(device: torch.device) -> dict[str, int]:
    """The CUDA caching allocator's view: reserved minus allocated now, retries and OOMs so far."""
    stats = torch.cuda.memory_stats(device)
    return {"reserved_minus_allocated_bytes": int(stats.get("reserved_bytes.all.current", 0))
            - int(stats.get("allocated_bytes.all.current", 0)),
            "max_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
            "num_alloc_retries": int(stats.get("num_alloc_retries", 0)), "num_ooms": int(stats.get("num_ooms", 0))}


def record_memory_history() -> None:
    """Keep the CUDA allocator's recent history, so an OOM can be explained from a snapshot.

    Python stacks only (``stacks="python"``): the default also unwinds the C++ stack of every
    allocation, which costs far more per allocation, and this runs during the timed steps.
    """
    if torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(max_entries=100_000, stacks="python")


def dump_oom_snapshot(path: str) -> str | None:
    """Write the allocator's snapshot (open it at pytorch.org/memory_viz) after an OOM; its path, or None."""
    if not torch.cuda.is_available():
        return None
    try:
        torch.cuda.memory._dump_snapshot(path)
    except Exception:  # noqa: BLE001 - the snapshot is a diagnostic; the OOM itself is reported anyway
        return None
    return path


def memory_categories(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's per-category bytes: the largest rank in each (the rank that decides what fits)."""
    keys = ("param_bytes", "grad_bytes", "optim_bytes", "activation_bytes", "buffer_bytes", "activation_peak_bytes",
            "tracked_peak_bytes", "reserved_minus_allocated_bytes", "max_reserved_bytes", "num_alloc_retries", "num_ooms")
    out: dict[str, Any] = {}
    for key in keys:
        values = [r.get(key) for r in ranks if r.get(key) is not None]
        out[key] = max(values) if values else None
    out["method"] = "tensor_tracker"
    return out
