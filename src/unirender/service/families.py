"""The service's family registry: ``environment.protocol`` -> that family's service adapter.

A request that starts something (``POST /v1/sessions``, ``/v1/render``, ``/v1/jobs``) names its family in its
``environment.protocol`` (AI2-THOR when absent: ``unirender.simulator.family_of``); the family is looked up here
ONCE, and a session keeps the adapter it got (``SessionEntry.adapter``, a :class:`SessionAdapter`), so a step or
a reset never looks the family up again. An adapter declares, per family:

- the bodies (pydantic models, also the OpenAPI schemas): ``session_body``, ``step_body`` (or the name of a
  hand-written schema), ``reset_body``, ``render_body``, ``job_body``;
- ``create_session(app, owner, data)``: validate, check the service's limits, start the player, keep a
  :class:`SessionAdapter` on the new entry;
- ``render(app, owner, data, fmt, json_as_sent)``: a one-shot ``/v1/render`` (``service.one_shot``), the list of
  event documents;
- ``job_spec(app, data)``: a submitted job spec, validated and checked (``JobManager`` runs it);

and, per session (:class:`SessionAdapter`): ``step``/``reset`` (the body checked, the action check included, then
``app.sessions``) and ``document`` (the event document, ``service.documents``).

A third family adds one line to :data:`SERVICE_FAMILIES` and its adapter module (``service/<family>_sessions.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from unirender.deprecation import renamed
from unirender.errors import SpecError
from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, family_of, load_registered

if TYPE_CHECKING:
    from unirender.service.app import ServiceApp

# family -> "module:attribute" of its ServiceFamily (imported on first use: a family's extras load only with it)
SERVICE_FAMILIES: dict[str, str] = {
    AI2THOR: "unirender.service.ai2thor_sessions:FAMILY",
    MLAGENTS: "unirender.service.mlagents_sessions:FAMILY",
    WEBGL: "unirender.service.webgl_sessions:FAMILY",
}
_loaded: dict[str, ServiceFamily] = {}


class SessionAdapter(Protocol):
    """A family's view of one session, kept on its ``SessionEntry`` (``entry.adapter``) from creation on."""

    def step(self, app: ServiceApp, owner: str, session_id: str, data: Any) -> Any:
        """Check one step's body (400/422 before the player sees it) and step the session; the family's event."""

    def begin_step(self, app: ServiceApp, owner: str, session_id: str, data: Any) -> Callable[[], Any]:
        """:meth:`step` in two halves: checked (raising at once) and started now; the function returned gives the
        event or raises the step's error (``SessionRegistry.begin_step``). The batched steps' path."""

    def reset(self, app: ServiceApp, owner: str, session_id: str, data: Any) -> Any:
        """Check a reset's body and reset the session; the family's event."""

    def document(self, entry: Any, event: Any, modalities: list[str] | None, fmt: str,
                 json_as_sent: bool, batched: bool = False) -> dict:
        """The event's document (``service.documents``) for a response in ``fmt``; ``batched``: the client asked
        for its family's batched body (``Unirender-Body: batched``; a family without one ignores it)."""


class ServiceFamily(Protocol):
    """What the service knows of one family (see the module doc)."""

    name: str
    session_body: type[BaseModel]
    step_body: type[BaseModel] | str  # a model, or the name of a schema of openapi.py (an AI2-THOR action)
    reset_body: type[BaseModel]
    render_body: type[BaseModel]
    job_body: type[BaseModel]

    def create_session(self, app: ServiceApp, owner: str, data: Any) -> Any: ...

    def render(self, app: ServiceApp, owner: str, data: Any, fmt: str, json_as_sent: bool) -> list[dict]: ...

    def job_spec(self, app: ServiceApp, data: Any) -> Any: ...


def family(name: str) -> ServiceFamily:
    """The adapter of family ``name`` (imported once, under a lock: requests arrive on many threads)."""
    found = _loaded.get(name)
    if found is not None:
        return found
    found = _loaded[name] = load_registered(SERVICE_FAMILIES, name, lambda: _protocol_error(
        f"{name!r} is not a protocol this service serves (it serves {', '.join(SERVICE_FAMILIES)})"))
    return found


def family_of_body(data: Any) -> ServiceFamily:
    """The family a request body names in ``environment.protocol`` (AI2-THOR when absent or when the body is not
    an object: its own validation then says what is wrong)."""
    environment = data.get("environment") if isinstance(data, dict) else None
    if not isinstance(environment, dict):
        return family(AI2THOR)
    try:
        return family(family_of(environment))
    except ValueError as exc:  # a protocol unirender does not know
        raise _protocol_error(str(exc)) from None


def _protocol_error(message: str) -> SpecError:
    """As the spec loader words it (-> 422 ``invalid_spec`` naming ``environment.protocol``)."""
    return SpecError(f"invalid request body:\n  environment.protocol: {message}", [("environment.protocol", message)])


def unresolved_session() -> SessionAdapter:
    """What answers a step or reset on a session id that is not (or no longer) there: the AI2-THOR adapter, which
    checks the body first (400/422, as the API always has) and then lets the registry say 404/410."""
    from unirender.service.ai2thor_sessions import SESSION

    return SESSION


def every_family() -> list[ServiceFamily]:
    """Every registered family (the OpenAPI document lists their bodies)."""
    return [family(name) for name in SERVICE_FAMILIES]


__all__ = ["SERVICE_FAMILIES", "ServiceFamily", "SessionAdapter", "every_family", "family", "family_of_body", "unresolved_session"]
__getattr__ = renamed(__name__, {"FAMILIES": "SERVICE_FAMILIES"})
