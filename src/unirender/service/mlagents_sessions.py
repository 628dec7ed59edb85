"""ML-Agents sessions over HTTP: ``POST /v1/sessions`` with ``environment.protocol: mlagents``, then steps with
actions per behavior. Same auth, registry (owners, limits, idle reaping, crash handling) and error bodies as
AI2-THOR sessions; only the bodies differ:

- create: ``{"environment": {"protocol": "mlagents", ...}, "record": {"sensors": [...]}, "auto_restart": false}``
  (the environment as in a job spec);
- step: ``{"actions": {behavior: {"continuous": [[...] per decision agent], "discrete": [[...]]}}}`` (a behavior
  left out gets zeros, as mlagents-envs does); checked by ``ActionPolicy.check_mlagents_actions`` against the
  behavior spec and the decision agents of the last event: wrong shapes are a 422 that names the path;
- reset: ``{"environment_parameters": {key: number}}`` (optional);
- the event: ``{"metadata": {"step", "behaviors": {name: {"agents": [...]}}}, "frames": {"<sensor>.<i>": uint8
  (H, W, C)}}``, exactly a dataset frame's record (``jobs.mlagents_episodes.frame_of``). JSON carries frames only
  when ``?modalities=`` names sensors (or frame keys); ``none`` gives metadata only.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field
from werkzeug.wrappers import Response

from unirender.service.errors import ApiError
from unirender.service.models import _Body, validate_body
from unirender.spec.mlagents import MLAgentsEnvironmentSpec, RecordSpec


class MLAgentsSessionCreate(_Body):
    """POST /v1/sessions for an ML-Agents game."""

    environment: MLAgentsEnvironmentSpec
    record: RecordSpec = Field(default_factory=RecordSpec, description="sensors/behaviors the events carry")
    auto_restart: bool = Field(False, description="restart the game if it crashes (the episode is lost)")


class BehaviorActions(_Body):
    continuous: list[list[float]] | None = Field(None, description="one row per decision agent, in order")
    discrete: list[list[int]] | None = Field(
        None, description="one row (a value per branch) per decision agent"
    )


class MLAgentsStep(_Body):
    """POST /v1/sessions/{id}/step on an ML-Agents session."""

    actions: dict[str, BehaviorActions] = Field(
        default_factory=dict, description="per behavior name; a behavior left out gets zeros"
    )


class MLAgentsReset(_Body):
    environment_parameters: dict[str, float] = Field(default_factory=dict)


def is_mlagents_body(body: Any) -> bool:
    env = body.get("environment") if isinstance(body, dict) else None
    return isinstance(env, dict) and env.get("protocol") == "mlagents"


def is_mlagents_entry(entry) -> bool:
    return entry.environment.get("environment", {}).get("protocol") == "mlagents"


def create_session(app, owner: str, data: dict) -> Response:
    body = validate_body(MLAgentsSessionCreate, data)
    app.policy.check_mlagents_environment(body.environment)
    kwargs = {**body.environment.controller_kwargs(), "protocol": "mlagents"}
    kwargs["log_dir"] = str(app.config.data_root / "player-logs")
    kwargs["max_restarts"] = max(1, body.environment.max_restarts) if body.auto_restart else 0
    if body.environment.environment_parameters:
        from unirender.spec.mlagents import resolve_parameters

        kwargs["environment_parameters"] = resolve_parameters(body.environment.environment_parameters, 0)
    entry = app.sessions.create(owner, kwargs, body.model_dump(mode="json"), auto_restart=body.auto_restart)
    try:
        _check_record(entry)
    except BaseException:
        app.sessions.delete(owner, entry.id, "its record section names what the game does not have")
        raise
    resp = app._json(entry.describe(), status=201)
    resp.headers["Location"] = f"/v1/sessions/{entry.id}"
    return resp


def job_spec(app, data: dict):
    """POST /v1/jobs with an ML-Agents job: validated as the loader does (strict types first), its game checked."""
    from unirender.spec import load_spec
    from unirender.spec.mlagents import MLAgentsJobSpec

    if getattr(app.backend, "name", "local") != "local":
        raise ApiError(422, "not_supported", "ML-Agents jobs run their games in the service process: this "
                       f"service's sessions live on the {app.backend.name!r} backend; run `unirender render` there")
    validate_body(MLAgentsJobSpec, data)
    spec = load_spec(data)
    app.policy.check_mlagents_environment(spec.environment)
    return spec


def _specs(entry) -> dict:
    from unirender.cluster.mlagents import behavior_specs

    return behavior_specs(entry.session)


def _check_record(entry) -> None:
    from unirender.errors import SpecError
    from unirender.jobs.episodes import EpisodeFailed
    from unirender.jobs.mlagents_episodes import check_record

    record = RecordSpec.model_validate(entry.environment.get("record") or {})
    try:
        check_record(record, _specs(entry))
    except EpisodeFailed as exc:
        path, _, message = str(exc).partition(": ")
        raise SpecError(f"invalid request body: {exc}", [(path, message)]) from None


def step(app, owner: str, entry, data: Any, fmt: str, modalities: list[str] | None) -> Response:
    if not isinstance(data, dict):
        raise ApiError(
            400,
            "invalid_action",
            'the body must be {"actions": {behavior: {"continuous": [[...]], "discrete": [[...]]}}}',
        )
    body = validate_body(MLAgentsStep, data)
    last = entry.session.last_event
    counts = {name: len(steps) for name, steps in last.decision_steps.items()} if last is not None else {}
    actions = {name: a.model_dump(exclude_none=True) for name, a in body.actions.items()}
    app.policy.check_mlagents_actions(actions, _specs(entry), counts)
    started = time.perf_counter()
    event = app.sessions.step(owner, entry.id, _arrays(actions, _specs(entry), counts))
    return respond(app, entry, event, fmt, modalities, time.perf_counter() - started)


def reset(app, owner: str, entry, data: Any, fmt: str, modalities: list[str] | None) -> Response:
    body = validate_body(MLAgentsReset, data)
    event = app.sessions.reset(owner, entry.id, None, body.environment_parameters)
    return respond(app, entry, event, fmt, modalities, 0.0)


def _arrays(actions: dict, specs: dict, counts: dict) -> dict:
    """Checked lists -> per behavior ``{"continuous": float32 (n, c), "discrete": int32 (n, b)}``; a kind left
    out is zeros."""
    import numpy as np

    out = {}
    for name, given in actions.items():
        spec, n = specs[name].action_spec, counts.get(name, 0)
        out[name] = {
            "continuous": np.asarray(given.get("continuous") or np.zeros((n, spec.continuous_size)), np.float32)
            .reshape(n, spec.continuous_size),
            "discrete": np.asarray(given.get("discrete") or np.zeros((n, spec.discrete_size)), np.int32)
            .reshape(n, spec.discrete_size),
        }  # fmt: skip
    return out


def event_document(entry, event) -> dict:
    from unirender.jobs.mlagents_episodes import frame_of

    record = RecordSpec.model_validate(entry.environment.get("record") or {})
    specs = _specs(entry)
    behaviors = [n for n in sorted(specs) if n in event.decision_steps
                 and (record.behaviors is None or n in record.behaviors)]  # fmt: skip
    sensors = set(record.sensors) if record.sensors else None
    frame = frame_of(entry.session.steps, event, specs, behaviors, sensors, None)
    return {"metadata": frame.metadata, "frames": frame.frames()}


def _select(frames: dict, wanted: list[str]) -> dict:
    selected = {}
    for name in wanted:
        matches = {k: v for k, v in frames.items() if k == name or k.rsplit(".", 1)[0] == name}
        if not matches:
            raise ApiError(
                400,
                "unknown_modality",
                f"{name!r} is not in this event; it has {sorted(frames)} "
                "(a sensor name selects every agent's frame of it)",
            )
        selected.update(matches)
    return selected


def respond(app, entry, event, fmt: str, modalities, step_s: float) -> Response:
    from unirender.service import http_format

    if fmt == http_format.JSON and modalities is None:
        modalities = []  # as for AI2-THOR events: JSON carries frames only on request
    started = time.perf_counter()
    doc = event_document(entry, event)
    if modalities is not None:
        doc["frames"] = _select(doc["frames"], modalities)
    resp = app._encoded(doc, fmt)
    resp.headers["Server-Timing"] = (
        f"step;dur={step_s * 1000:.3f}, encode;dur={(time.perf_counter() - started) * 1000:.3f}"
    )
    return resp
