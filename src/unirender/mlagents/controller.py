"""``MLAgentsController``: run a Unity ML-Agents game (or the reference player) and step it from Python.

We are the gRPC server the game connects to, as mlagents-envs' ``UnityEnvironment`` is, with what that lacks:
the player is launched on the platform ``platforms.resolve()`` picks (a display or Xvfb for GLX, or Vulkan) with
``-batchmode`` and never ``-nographics`` (cameras stay real), on a free port unirender picks, its log in a
per-session file; a crash is reported within a second with the log's last lines and the player is restarted
(bounded); messages may be far larger than gRPC's 4 MiB default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from unirender._process import RestartBudget, RestartWindow
from unirender.errors import PlayerCrashedError, PlayerError, RestartError
from unirender.simulator import BUILTIN

EDITOR_PORT = 5004  # where ML-Agents' Editor and players without --mlagents-port look for a trainer


def camera_frames(event) -> dict:
    """The camera views of an ML-Agents event, ``{"<behavior>/<sensor>": uint8 (n, H, W, C)}`` as ``describe()``
    names them (the decision agents'); the registry's reader for this family."""
    return {
        f"{behavior}/{sensor}": frames
        for behavior in event.behavior_names
        for sensor, frames in event.frames(behavior).items()
    }


class MLAgentsController(RestartWindow):
    """One ML-Agents player and its communicator. See ``docs/mlagents.md``.

    ``executable``: a Unity build, ``"builtin"`` (the reference player) or None (wait on ``port``, default 5004,
    for the Unity Editor in Play mode or a player started by hand). ``reset()`` and ``step(actions)`` return an
    :class:`~unirender.protocol.mlagents.MLAgentsEvent`; ``behavior_specs`` is known after the first ``reset()``.
    """

    family = "mlagents"  # a unirender.simulator.Simulator family (describe())
    close_grace_s = 2.0  # after the close message the player quits by itself; then SIGTERM, then SIGKILL

    def __init__(
        self,
        executable: str | os.PathLike | None = BUILTIN,
        port: int | None = None,
        width: int = 84,
        height: int = 84,
        time_scale: float = 1.0,
        quality_level: int | None = None,
        environment_parameters: Mapping[str, object] | None = None,
        platform: str | None = "auto",
        x_display: str | None = None,
        gpu_device: int | str | None = None,
        timeout: float | None = 60.0,
        start_timeout: float | None = 120.0,
        max_restarts: int = 3,
        max_message_bytes: int | None = None,
        seed: int = 0,
        layout: str | None = None,
        no_graphics: bool = False,
        args: tuple[str, ...] | list[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike | None = None,
        num_areas: int = 1,
        allow_blank_cameras: bool = False,
        build: str | None = None,
    ):
        from unirender.builds.resolve import controller_build
        from unirender.controller import new_log_path
        from unirender.protocol.mlagents.side_channels import Sampler
        from unirender.protocol.mlagents.versions import check_layout
        from unirender.transport.grpc import DEFAULT_MAX_MESSAGE_BYTES

        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not time_scale >= 1.0:
            raise ValueError(f"time_scale must be >= 1 (Unity clamps it there), got {time_scale!r}")
        self.environment_parameters = dict(environment_parameters or {})
        for key, value in self.environment_parameters.items():
            if not (isinstance(value, Sampler) or (isinstance(value, int | float) and not isinstance(value, bool))):
                raise TypeError(f"environment parameter {key!r} must be a number or a Sampler, got {value!r}")
        self.layout = check_layout(layout)
        self.build_digest: str | None = None  # the build store's digest when the build was named by reference
        if executable is not None or build is not None:  # a reference (build=, or in executable) -> its executable
            resolved = controller_build(BUILTIN if executable is None else executable, build=build, platform=platform)
            executable, self.build_digest = resolved.executable, resolved.stored and resolved.stored.digest
            self._build_lease = resolved.lease()  # held until close(): no eviction while the player runs
        self.editor = executable is None
        self.builtin = str(executable) == BUILTIN
        self.executable = None if self.editor else (BUILTIN if self.builtin else os.fspath(executable))
        if not (self.editor or self.builtin) and not os.access(self.executable, os.X_OK):
            raise FileNotFoundError(f"player executable {self.executable!r} does not exist or is not executable")
        self.port_choice = EDITOR_PORT if (self.editor and port is None) else (port or 0)
        self.width, self.height, self.time_scale, self.quality_level = width, height, float(time_scale), quality_level
        self.platform_choice, self.x_display, self.gpu_device = platform, x_display, gpu_device
        self.timeout, self.start_timeout, self.max_restarts = timeout, start_timeout, max_restarts
        self.max_message_bytes = int(max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES)
        self.seed, self.no_graphics = int(seed), bool(no_graphics)
        # no_graphics with a camera sensor trains on black images ("never converges": ml-agents #6206, #4874):
        # refused once the game declares its sensors, unless the caller says blank cameras are what it wants.
        self.allow_blank_cameras = bool(allow_blank_cameras)
        if isinstance(num_areas, bool) or not isinstance(num_areas, int) or num_areas < 1:
            raise ValueError(f"num_areas must be a positive int, got {num_areas!r}")
        self.num_areas = num_areas  # the handshake's: a game with a TrainingAreaReplicator builds that many areas
        self.extra_args, self.extra_env = [str(a) for a in args], dict(env or {})
        self.protocol = None
        self.server = None
        self.process = None
        self.resolution = None
        self.last_event = None
        self.restarts = RestartBudget(max_restarts)  # max_restarts counts restarts within a rolling 600 s
        self._queued: list = []  # side-channel records for the next message
        self._closed = False
        self._needs_reset = True
        self.log_path = new_log_path(log_dir, "mlagents")
        try:
            if not self.editor:
                self.resolution = self._resolve_platform()
            self._launch()
        except BaseException:
            self.close()
            raise

    # -- public API -------------------------------------------------------------------------------------------
    @property
    def port(self) -> int | None:
        return self.server.port if self.server is not None else None

    @property
    def behavior_specs(self):
        """``{behavior name: BehaviorSpec}`` (filled by the first ``reset()``; behaviors may appear later)."""
        return dict(self.protocol.behavior_specs) if self.protocol is not None else {}

    @property
    def behavior_names(self) -> list[str]:
        return list(self.behavior_specs)

    @property
    def unity(self):
        """What the player said about itself in the handshake (versions, capabilities, image layout)."""
        return self.protocol.unity if self.protocol is not None else None

    def reset(self):
        """Start new episodes (RESET); returns the first event. Engine settings and environment parameters ride
        along the first reset after each launch."""
        return self._guarded(self._reset)

    def step(self, actions=None):
        """Advance to the next decision. ``actions``: ``{behavior: ActionTuple | {"continuous":, "discrete":} |
        array}`` (one array when the behavior's actions are all continuous or all discrete), or just the value
        when there is one behavior. Agents left out get zeros; order = the order of ``DecisionSteps``. Before the
        first ``reset()`` (or after a restart) this resets instead, as mlagents-envs does."""
        return self._guarded(lambda: self._step(actions))

    def stop(self) -> None:
        """The simulator port's name for :meth:`close`."""
        self.close()

    def describe(self):
        """A :class:`unirender.simulator.Description`: where the game runs, and per behavior its action space and
        sensors (camera shapes as ``frames()`` hands them out: H, W, C uint8). Behaviors are known after the
        first ``reset()``."""
        from unirender.protocol.mlagents import observations as O
        from unirender.simulator import (
            ActionDescription,
            BehaviorActions,
            Description,
            ObservationDescription,
            describe_placement,
        )

        layout = self.unity.layout if self.unity is not None else "HWC"
        behaviors, observations = {}, []
        for name, spec in self.behavior_specs.items():
            a = spec.action_spec
            behaviors[name] = BehaviorActions(a.continuous_size, tuple(a.discrete_branches))
            for obs in spec.observation_specs:
                key = f"{name}/{obs.name}"
                if obs.is_visual:
                    sensor_layout = obs.layout or layout
                    observations.append(ObservationDescription(key, "image", O.hwc_shape(obs.shape, sensor_layout),
                                                               "uint8", camera=True, behavior=name,
                                                               layout=sensor_layout))  # fmt: skip
                else:
                    observations.append(ObservationDescription(key, "vector", tuple(obs.shape), "float32",
                                                               behavior=name))  # fmt: skip
        unity = self.unity
        return Description(
            family=self.family,
            actions=ActionDescription("behaviors", behaviors=behaviors),
            observations=tuple(observations),
            server_type="gRPC",
            build_version=(unity.package_version or None) if unity is not None else None,
            **describe_placement(self),
        )

    def set_environment_parameters(self, **parameters) -> None:
        """Send ``key=float`` or ``key=Sampler`` with the next message (and again after a restart)."""
        from unirender.protocol.mlagents.side_channels import environment_parameter_messages

        self._queued += environment_parameter_messages(parameters)  # checks the values first
        self.environment_parameters.update(parameters)

    def send_side_channel(self, channel_id, payload: bytes) -> None:
        """A raw record for a game's own side channel (ML-Agents' RawBytesChannel), sent with the next message."""
        from unirender.protocol.mlagents.side_channels import raw_bytes_message

        self._queued.append(raw_bytes_message(channel_id, payload))

    def close(self) -> None:
        """Tell the player to quit (status 400), wait briefly, then SIGTERM/SIGKILL; free the port, the log file
        and any Xvfb. Idempotent."""
        self._closed = True
        self._shutdown()
        if self.resolution is not None:
            self.resolution.release()
            self.resolution = None
        build_lease, self._build_lease = getattr(self, "_build_lease", None), None
        if build_lease is not None:
            build_lease.release()

    def __enter__(self) -> MLAgentsController:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # last resort: a forgotten controller must not leave a player behind
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        where = "the Unity Editor" if self.editor else self.executable
        return f"<MLAgentsController {where} port={self.port} {self.width}x{self.height}>"

    # -- launching ------------------------------------------------------------------------------------------
    def _resolve_platform(self):
        from unirender.platforms import PlatformRequest, resolve

        request = PlatformRequest.of(self, headless=self.no_graphics, builtin=self.builtin)
        return resolve(request, platform=self.platform_choice or "auto")

    def player_args(self, port: int) -> list[str]:
        """What a Unity build gets: the port, the log file, the window size, ``-batchmode`` (rendering stays on:
        ``-nographics`` only with ``no_graphics=True``), the platform's own flags, then ``args``."""
        args = ["--mlagents-port", str(port), "-logFile", self.log_path]
        args += ["-batchmode", "-nographics"] if self.no_graphics else ["-batchmode"]
        args += ["-screen-fullscreen", "0", "-screen-width", str(self.width), "-screen-height", str(self.height)]
        if self.resolution is not None:
            args += list(self.resolution.args)
        return args + self.extra_args

    def _launch(self) -> None:
        from unirender._process import ManagedProcess
        from unirender.protocol.mlagents.trainer import TrainerProtocol
        from unirender.transport.grpc import ExchangeServer

        self.protocol = TrainerProtocol(seed=self.seed, num_areas=self.num_areas, layout=self.layout)
        self.server = ExchangeServer(port=self.port_choice, max_message_bytes=self.max_message_bytes)
        port = self.server.start()
        if not self.editor:
            env = dict(os.environ)
            env.update(self.resolution.env if self.resolution else {})
            if self.builtin:
                env["UNIRENDER_PLAYER_BACKEND"] = (self.resolution.backend if self.resolution else None) or "egl"
            env.update(self.extra_env)
            for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
                env.pop(proxy, None)  # a proxy would swallow the player's call to localhost
            command = [sys.executable, "-m", "unirender.player"] if self.builtin else [self.executable]
            name = "unirender-player (builtin, ML-Agents)" if self.builtin else Path(self.executable).name
            self.process = ManagedProcess([*command, *self.player_args(port)], env=env, log_path=self.log_path,
                                          name=name)  # fmt: skip
            self.server.attach(self.process)
        self._handshake()
        self._queued = self._settings_messages() + self._queued
        self._needs_reset = True

    def _handshake(self) -> None:
        """H1 -> our H2 reply -> H3, which stays open until the first reset(). A version mismatch raises here;
        closing then answers the open call with the close message."""
        got = self.protocol.receive(self.server.receive(self.start_timeout, "did not connect"))
        self.server.reply(got.reply)
        self.protocol.receive(self.server.receive(self.start_timeout, "did not finish the handshake"))

    def _settings_messages(self) -> list:
        from unirender.protocol.mlagents.side_channels import EngineConfig, environment_parameter_messages

        engine = EngineConfig(width=self.width, height=self.height, quality_level=self.quality_level,
                              time_scale=self.time_scale)  # fmt: skip
        return engine.messages() + environment_parameter_messages(self.environment_parameters)

    # -- the hot path ---------------------------------------------------------------------------------------
    def _reset(self):
        self._needs_reset = False
        records, self._queued = self._queued, []
        self.server.reply(self.protocol.reset(records))
        return self._receive_event()

    def _step(self, actions):
        if self._needs_reset:  # no episode yet (a fresh or restarted player): as mlagents-envs, step() resets
            return self._reset()
        specs = self.protocol.behavior_specs
        if actions is None:
            actions = {}
        elif not (isinstance(actions, Mapping) and set(actions) <= set(specs)):  # the value for the only behavior
            if len(specs) != 1:
                raise ValueError(f"pass actions as {{behavior name: actions}}; behaviors: {sorted(specs)}")
            actions = {next(iter(specs)): actions}
        data = self.protocol.step(actions, self._queued)  # raises on bad actions before anything is sent
        self._queued = []
        self.server.reply(data)
        return self._receive_event()

    def _receive_event(self):
        got = self.protocol.receive(self.server.receive(self.timeout))
        self.last_event = got.result
        if self.no_graphics and not self.allow_blank_cameras:
            self._refuse_blank_cameras()
        return got.result

    def _refuse_blank_cameras(self) -> None:
        cameras = [f"{name}/{obs.name}" for name, spec in self.protocol.behavior_specs.items()
                   for obs in spec.observation_specs if obs.is_visual]  # fmt: skip
        if cameras:
            self.close()
            raise ValueError(
                f"no_graphics=True, but the game declares camera sensors ({', '.join(cameras)}): with "
                "-nographics Unity renders nothing and every camera observation is black, so a policy trained "
                "on them learns nothing. Leave no_graphics off (unirender renders headless through EGL, Vulkan "
                "or Xvfb), or pass allow_blank_cameras=True if blank images are what you want."
            )

    # -- failure handling -----------------------------------------------------------------------------------
    # Crash supervision (RestartWindow._supervised): a hang, garbage, a version mismatch, Unity quitting: unusable.
    _crash_error, _restarted_error, _ended = PlayerCrashedError, RestartError, "closed"

    @property
    def _unusable_errors(self) -> tuple[type[BaseException], ...]:
        from unirender.protocol.errors import ProtocolError

        return PlayerError, ProtocolError

    @property
    def _noted_errors(self) -> tuple[type[BaseException], ...]:
        return self._unusable_errors[1:]

    def _guarded(self, operation):
        if self._closed:
            raise PlayerError("this MLAgentsController is closed; create a new one", log_path=self.log_path)
        if self.protocol is None:
            raise PlayerError("the player is gone (a failed restart); create a new controller", log_path=self.log_path)
        return self._supervised(operation)

    def _shutdown_player(self) -> None:
        self._shutdown()

    def _relaunch(self) -> None:
        self._launch()

    def _end(self) -> None:
        self.close()

    def _may_restart(self) -> bool:
        return not self.editor  # nobody to relaunch in Editor mode

    def _restarted_message(self, crash: BaseException) -> str:
        return (f"the ML-Agents player crashed and was restarted ({len(self.restarts)} of max {self.max_restarts} "
                f"within {self.restart_window_s:g} s); call reset() to start new episodes. Cause: {crash}")  # fmt: skip

    def _shutdown(self) -> None:
        process, server = self.process, self.server
        if server is not None:
            server.stop()  # answers the open call with the close message (status 400): the player quits
        if process is not None:
            if process.wait(self.close_grace_s) is None:
                process.terminate(self.close_grace_s)
            else:
                process.terminate(0)  # reaps, closes our end of the log
        self.server = self.process = None
        self.protocol = None if self._closed else self.protocol
