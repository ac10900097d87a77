"""Which measurements apply to the session a run uses.

A row that needs a capability the backend lacks (``session.capabilities``: snapshots, branches,
cancel) or that only compares something with llama.cpp (the engine vs the bare llama.cpp loop)
is recorded with ``"status": "not applicable: <reason>"`` and no figures: rendered as a line of
the report, never a failure, never dropped. Measured rows carry ``"status": "ok"``. Goals that
depend on such a row are ``"not evaluated"`` (see ``goals``).
"""

from __future__ import annotations

from typing import Any

NOT_APPLICABLE = "not applicable"

#: How each capability of ``Session.capabilities`` is named in a reason.
CAPABILITY_NAMES = {
    "snapshots": "snapshots (save/restore of the sequence's KV state)",
    "branches": "parked branches",
    "cancel": "cancellation",
    "prefix_reuse": "prefix reuse",
}

#: The backend that ``bare.py``'s loop and the trace's llama-cpp-python baselines are written
#: for: comparing the engine with them means something on this backend only.
BARE_LOOP_BACKEND = "llama"


def not_applicable(reason: str) -> str:
    return f"{NOT_APPLICABLE}: {reason}"


def is_not_applicable(item: Any) -> bool:
    """Whether a status string, or a row/section dict by its ``status``, is not applicable."""
    status = item.get("status") if isinstance(item, dict) else item
    return isinstance(status, str) and status.startswith(NOT_APPLICABLE)


def backend_of(session: Any) -> str:
    return str(getattr(session, "backend", "unknown"))


def lacks(session: Any, capability: str) -> str | None:
    """None when the session has ``capability``; else the not-applicable status naming it."""
    caps = getattr(session, "capabilities", None) or {}
    if caps.get(capability, False):
        return None
    what = CAPABILITY_NAMES.get(capability, capability)
    return not_applicable(f"the {backend_of(session)} backend has no {what}")


def bare_loop(session: Any) -> str | None:
    """None when the engine-vs-bare-loop comparison means something on this session."""
    backend = backend_of(session)
    if backend == BARE_LOOP_BACKEND:
        return None
    return not_applicable(f"the bare loop it is compared with is llama.cpp's; this run's "
                          f"backend is {backend}")


def row(name: str, label: str, status: str) -> dict[str, Any]:
    """A row that was not measured, in the shape every report row has."""
    return {"name": name, "label": label, "status": status, "check": "n/a"}
