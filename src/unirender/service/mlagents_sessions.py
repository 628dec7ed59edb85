"""The ML-Agents family of the service (``service.families``): ``environment.protocol: mlagents``. Same auth,
registry (owners, limits, idle reaping, crash handling) and error bodies as AI2-THOR sessions; only the bodies
differ:

- create: ``{"environment": {"protocol": "mlagents", ...}, "record": {"sensors": [...]}, "auto_restart": false}``
  (the environment as in a job spec);
- step: ``{"actions": {behavior: {"continuous": [[...] per decision agent], "discrete": [[...]]}}}`` (a behavior
  left out gets zeros, as mlagents-envs does); checked by :func:`check_behavior_actions` against the session's action
  spaces (``Session.describe()``, read once when the session starts) and the decision agents of the last event:
  wrong shapes are a 422 that names the path; a msgpack body may give the rows as arrays
  (``http_format.array_description``: :func:`split_action_arrays`), checked with the same words;
- reset: ``{"environment_parameters": {key: number}}`` (optional);
- the event: :func:`mlagents_document`, exactly a dataset frame's record. JSON carries frames only
  when ``?modalities=`` names sensors (or frame keys); ``none`` gives metadata only. A request with
  ``Unirender-Body: batched`` gets :func:`batched_document` instead: each sensor one ``(agents, ...)`` array in
  its native dtype (docs/service.md);
- render: ``{"environment", "record", "episode": MLAgentsEpisodeSpec}``: each repeat of the episode on a fresh
  game launched with its seed and parameters, driven by the jobs' episode driver
  (``jobs.mlagents_episodes.run_mlagents_frames``): the same frames as a job's;
- jobs: an ``MLAgentsJobSpec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ConfigDict, Field

from unirender.deprecation import renamed
from unirender.errors import SpecError
from unirender.http_format import WireError, array_from_description, is_array_description
from unirender.jobs.mlagents_episodes import behavior_views, frame_of
from unirender.protocol.mlagents.actions import ActionError, check_actions
from unirender.protocol.mlagents.steps import ActionSpec
from unirender.service.errors import ApiError
from unirender.service.models import StrictBody, validate_body
from unirender.service.one_shot import (
    OneShotSimulator,
    RenderDocuments,
    check_frame_count,
    session_controller_kwargs,
)
from unirender.simulator import MLAGENTS
from unirender.spec.mlagents import MLAgentsEnvironmentSpec, MLAgentsEpisodeSpec, MLAgentsJobSpec, RecordSpec

if TYPE_CHECKING:
    from unirender.service.app import ServiceApp


# -- the event document (service.documents has the other families' and the encoding) ---------------------
def select_sensor_frames(frames: dict, wanted: list[str]) -> dict:
    """A sensor name selects every agent's frame of it (``CameraSensor`` -> ``CameraSensor.0``, ...); a frame key
    selects itself; anything else is a 400."""
    selected = {}
    for name in wanted:
        matches = {k: v for k, v in frames.items() if k == name or k.rsplit(".", 1)[0] == name}
        if not matches:
            raise ApiError(400, "unknown_modality", f"{name!r} is not in this event; it has {sorted(frames)} "
                           "(a sensor name selects every agent's frame of it)")
        selected.update(matches)
    return selected


def mlagents_document(event: Any, step: int, specs: Mapping[str, Any], record: Any,
                      modalities: list[str] | None = None, actions: dict | None = None) -> dict:
    """An MLAgentsEvent -> ``{"metadata": {"step", "behaviors"}, "frames"}``: the record of a dataset frame
    (``frame_of``) of the behaviors ``record.behaviors`` names (all when None) that the event has, their sensors
    ``record.sensors`` (all when None). ``specs``: ``{behavior: BehaviorSpec}`` (the sensors' order and kinds)."""
    behaviors = [n for n in sorted(specs) if n in event.decision_steps
                 and (record.behaviors is None or n in record.behaviors)]  # fmt: skip
    sensors = set(record.sensors) if record.sensors else None
    frame = frame_of(step, event, specs, behaviors, sensors, actions)
    frames = frame.frames()
    if modalities is not None:
        frames = select_sensor_frames(frames, modalities)
    return {"metadata": frame.metadata, "frames": frames}


def batched_document(event: Any, step: int, specs: Mapping[str, Any], record: Any, modalities: list[str] | None = None,
                     layouts: Mapping[tuple[str, str], str] | None = None) -> dict:
    """An MLAgentsEvent -> the batched body (``Unirender-Body: batched``, docs/service.md): per behavior and kind
    (``decision``, ``terminal``) one array per field under ``frames``, ``"<behavior>/<kind>/<field>"``:
    ``agent_id`` int32 ``(n,)``, ``reward`` float32, ``group_id`` int32, ``group_reward`` float32,
    ``interrupted`` bool (terminal), ``action_mask`` bool ``(n, sum(branches))`` (decision, when the game masks),
    (``group_*`` only when some agent has a group; a terminal kind with no agent, when the decision has some, not
    at all: the client makes its empty arrays, the per-behavior ``decision``/``terminal`` counts say so)
    and every recorded sensor (``modalities``: only those named) in its native dtype: a camera's uint8
    ``(n, H, W, C)`` frames, a vector's float32 ``(n, *shape)``. ``metadata``: ``step``, ``batched: true`` and per
    behavior its ``sensors`` (in the game's order), ``cameras``, ``layouts`` and ``action_branches``."""
    behaviors = [n for n in sorted(specs) if n in event.decision_steps
                 and (record.behaviors is None or n in record.behaviors)]  # fmt: skip
    recorded = set(record.sensors) if record.sensors else None
    wanted = set(modalities) if modalities is not None else None
    if wanted:
        known = {o.name for n in behaviors for o in specs[n].observation_specs
                 if recorded is None or o.name in recorded}  # fmt: skip
        unknown = sorted(wanted - known)
        if unknown:
            raise ApiError(400, "unknown_modality", f"{unknown[0]!r} is not a sensor of this event; it has "
                           f"{sorted(known)}")
    metadata: dict[str, Any] = {"step": step, "batched": True, "behaviors": {}}
    frames: dict[str, Any] = {}
    for name in behaviors:
        sensors = [o for o in specs[name].observation_specs
                   if (recorded is None or o.name in recorded) and (wanted is None or o.name in wanted)]  # fmt: skip
        branches = list(specs[name].action_spec.discrete_branches)
        metadata["behaviors"][name] = {
            "sensors": [o.name for o in sensors], "cameras": [o.name for o in sensors if o.is_visual],
            "layouts": {o.name: layouts[name, o.name] for o in sensors if (name, o.name) in (layouts or {})},
            "action_branches": branches,
        }  # fmt: skip
        decision, terminal = event.decision_steps[name], event.terminal_steps[name]
        metadata["behaviors"][name].update(decision=len(decision), terminal=len(terminal))
        for kind, steps in (("decision", decision), ("terminal", terminal)):
            if kind == "terminal" and not len(terminal) and len(decision):
                continue  # no agent ended (most steps): the client makes the empty arrays from the decision's
            at = f"{name}/{kind}/"
            frames[at + "agent_id"], frames[at + "reward"] = steps.agent_id, steps.reward
            if steps.group_id.any() or steps.group_reward.any():  # left out: zeros, no group
                frames[at + "group_id"], frames[at + "group_reward"] = steps.group_id, steps.group_reward
            if kind == "terminal":
                frames[at + "interrupted"] = steps.interrupted
            elif branches and steps.action_mask is not None:
                frames[at + "action_mask"] = np.concatenate(steps.action_mask, axis=1)
            for o in sensors:
                frames[at + o.name] = steps.sensor_array(o.name)
    return {"metadata": metadata, "frames": frames}


class MLAgentsSessionCreate(StrictBody):
    """POST /v1/sessions for an ML-Agents game."""

    environment: MLAgentsEnvironmentSpec
    record: RecordSpec = Field(default_factory=RecordSpec, description="sensors/behaviors the events carry")
    auto_restart: bool = Field(False, description="restart the game if it crashes (the episode is lost)")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="the game's seed at launch (Unity's Random.InitState)")


class BehaviorActionsBody(StrictBody):
    # One behavior's actions in a step body. Its OpenAPI schema keeps its name (and no description) from before
    # the rename: ``BehaviorActions`` (simulator.BehaviorActions is the game's action space).
    __qualname__ = "BehaviorActions"
    model_config = ConfigDict(title="BehaviorActions")
    continuous: list[list[float]] | None = Field(None, description="one row per decision agent, in order")
    discrete: list[list[int]] | None = Field(
        None, description="one row (a value per branch) per decision agent"
    )


class MLAgentsStep(StrictBody):
    """POST /v1/sessions/{id}/step on an ML-Agents session."""

    actions: dict[str, BehaviorActionsBody] = Field(
        default_factory=dict, description="per behavior name; a behavior left out gets zeros"
    )


class MLAgentsReset(StrictBody):
    environment_parameters: dict[str, float] = Field(default_factory=dict)


class MLAgentsRenderRequest(StrictBody):
    """POST /v1/render for an ML-Agents game: one episode (``steps`` steps of its policy after the reset; each
    repeat on a fresh game seeded ``seed + i``), every frame in the response."""

    environment: MLAgentsEnvironmentSpec
    record: RecordSpec = Field(default_factory=RecordSpec, description="sensors/behaviors the events carry")
    episode: MLAgentsEpisodeSpec


def check_behavior_actions(actions: dict, spaces: Mapping[str, Any], decision_counts: dict, max_agents: int) -> dict:
    """One step's ``{behavior: {"continuous": rows, "discrete": rows}}`` (lists or arrays) against the action spaces
    (``Description.actions.behaviors``) and the decision agents of the last event (at most ``max_agents``:
    ``limits.agents``) -> ``{behavior: {"continuous": float32 (n, c), "discrete": int32 (n, b)}}``. The check is
    the one every way in shares (``protocol.mlagents.actions``); what it refuses is a 422 with its code, path and
    words."""
    specs = {name: ActionSpec(space.continuous, tuple(space.discrete)) for name, space in spaces.items()}
    try:
        checked = check_actions(actions, specs, decision_counts, max_agents)
    except ActionError as exc:
        raise ApiError(422, exc.code, str(exc), path=exc.path) from None
    return {name: {"continuous": action.continuous, "discrete": action.discrete} for name, action in checked.items()}


def split_action_arrays(data: Any) -> tuple[Any, dict]:
    """A step body whose actions may be arrays (a msgpack body's array descriptions, ``http_format``) -> (the
    body with those left out, for the model to check the rest; ``{(behavior, kind): ndarray}``). A malformed
    description is a 422 naming its path."""
    actions = data.get("actions") if isinstance(data, dict) else None
    if not isinstance(actions, dict):
        return data, {}
    arrays: dict = {}
    stripped: dict = {}
    for name, given in actions.items():
        if not isinstance(given, dict):
            stripped[name] = given
            continue
        rest = {}
        for kind, value in given.items():
            if kind in ("continuous", "discrete") and is_array_description(value):
                try:
                    arrays[name, kind] = array_from_description(value)
                except WireError as exc:
                    raise ApiError(422, "invalid_action", f"actions.{name}.{kind}: {exc}",
                                   path=f"actions.{name}.{kind}") from None
            else:
                rest[kind] = value
        stripped[name] = rest
    return ({**data, "actions": stripped} if arrays else data), arrays


def _check_record(record: RecordSpec, specs: dict) -> None:
    from unirender.jobs.episodes import EpisodeFailed
    from unirender.jobs.mlagents_episodes import check_record

    try:
        check_record(record, specs)
    except EpisodeFailed as exc:
        path, _, message = str(exc).partition(": ")
        raise SpecError(f"invalid request body: {exc}", [(path, message)]) from None


class MLAgentsSession:
    """The ML-Agents view of one session: its action spaces and sensors (from ``Session.describe()`` when it
    started; again when a step brings behaviors the game had not declared yet) and what its events record."""

    def __init__(self, record: RecordSpec, description):
        self.record = record
        self._describe(description)

    def _describe(self, description) -> None:
        self.spaces = dict(description.actions.behaviors)
        self.specs = behavior_views(description)  # the jobs' reading of a description: one for both
        self.layouts = {(o.behavior, o.key[len(o.behavior) + 1:]): o.layout for o in description.observations
                        if o.behavior is not None and o.layout}  # fmt: skip

    def step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        return self.begin_step(app, owner, session_id, data)()

    def begin_step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        """:meth:`step` in two halves (``SessionRegistry.begin_step``): checked and started now, the function
        returned gives the event."""
        if not isinstance(data, dict):
            raise ApiError(400, "invalid_action", 'the body must be {"actions": {behavior: {"continuous": '
                           '[[...]], "discrete": [[...]]}}}')
        data, arrays = split_action_arrays(data)
        body = validate_body(MLAgentsStep, data)
        entry = app.sessions.get(owner, session_id)
        last = entry.session.last_event
        counts = {name: len(steps) for name, steps in last.decision_steps.items()} if last is not None else {}
        actions = {name: a.model_dump(exclude_none=True) for name, a in body.actions.items()}
        for (name, kind), rows in arrays.items():
            actions.setdefault(name, {})[kind] = rows
        checked = check_behavior_actions(actions, self.spaces, counts, app.policy.limits.agents)
        receive = app.sessions.begin_step(owner, session_id, checked)
        return lambda: self._seen(entry, receive())

    def reset(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        body = validate_body(MLAgentsReset, data)
        event = app.sessions.reset(owner, session_id, None, body.environment_parameters)
        return self._seen(app.sessions.get(owner, session_id), event)

    def _seen(self, entry, event):
        if not self.specs.keys() >= event.decision_steps.keys():  # a behavior the game had not declared yet
            self._describe(entry.session.describe())
        return event

    def document(self, entry: Any, event: Any, modalities: list[str] | None, fmt: str, json_as_sent: bool,
                 batched: bool = False) -> dict:
        if batched:
            return batched_document(event, entry.session.steps, self.specs, self.record, modalities, self.layouts)
        return mlagents_document(event, entry.session.steps, self.specs, self.record, modalities)


class MLAgentsFamily:
    name = MLAGENTS
    session_body = MLAgentsSessionCreate
    step_body = MLAgentsStep
    reset_body = MLAgentsReset
    render_body = MLAgentsRenderRequest
    job_body = MLAgentsJobSpec

    def create_session(self, app: ServiceApp, owner: str, data: Any):
        body = validate_body(MLAgentsSessionCreate, data)
        app.policy.check_game(body.environment)
        kwargs = session_controller_kwargs(app, body.environment, MLAGENTS, body.auto_restart)
        if body.seed:
            kwargs["seed"] = body.seed
        if body.environment.environment_parameters:
            from unirender.spec.mlagents import resolve_parameters

            kwargs["environment_parameters"] = resolve_parameters(body.environment.environment_parameters, 0)

        def adapt(entry: Any) -> MLAgentsSession:
            adapter = MLAgentsSession(body.record, entry.session.describe())
            _check_record(body.record, adapter.specs)
            return adapter

        return app.sessions.create(owner, kwargs, body.model_dump(mode="json"), auto_restart=body.auto_restart,
                                   adapt=adapt, failure="its record section names what the game does not have")

    def render(self, app: ServiceApp, owner: str, data: Any, fmt: str, json_as_sent: bool) -> list[dict]:
        from unirender.jobs.mlagents_episodes import MLAgentsSeat, expand_mlagents_units, run_mlagents_frames

        body = validate_body(MLAgentsRenderRequest, data)
        check_frame_count(body.episode.known_frame_count * body.episode.repeat)
        app.policy.check_game(body.environment)  # before any player starts
        spec = MLAgentsJobSpec(environment=body.environment, record=body.record, episodes=[body.episode])
        request_doc = body.model_dump(mode="json")
        kwargs = session_controller_kwargs(app, body.environment, MLAGENTS, auto_restart=False)
        docs = RenderDocuments()
        for unit in expand_mlagents_units(spec):  # each repeat on a fresh game: its seed decides its frames
            seat = MLAgentsSeat(lambda k: OneShotSimulator(app, owner, k, request_doc, MLAGENTS), kwargs)
            try:
                for _index, frame in run_mlagents_frames(seat, unit, spec):
                    docs.add({"metadata": frame.metadata, "frames": frame.frames()})
            finally:
                seat.stop()
        return docs

    def job_spec(self, app: ServiceApp, data: Any):
        """Validated as the loader does (strict types first), its game checked."""
        from unirender.spec import load_spec

        validate_body(MLAgentsJobSpec, data)
        spec = load_spec(data)
        app.policy.check_game(spec.environment)
        return spec


FAMILY = MLAgentsFamily()


__getattr__ = renamed(__name__, {"BehaviorActions": "BehaviorActionsBody", "check_actions": "check_behavior_actions"})
