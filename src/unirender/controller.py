"""``Controller``: launch a player (a Unity build or the builtin reference player), handshake, step, restart.

Familiar to AI2-THOR users: same constructor knobs, ``step``/``reset``/``stop``, ``last_event``. What differs is
what happens when things go wrong: every wait is bounded and watches the child, a crash is reported within a
second with its exit status, last action and log tail, and a bounded restart policy relaunches the player.
Launch contract: protocol.md 6.2 (arguments), 6.3 (environment), 6.4 (start sequence), 6.6 (results), 6.7 (restart).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from unirender._process import ManagedProcess, RestartBudget, RestartWindow, in_terminal_foreground
from unirender.builds.resolve import controller_build, is_webgl
from unirender.errors import ActionError, PlayerCrashedError, PlayerError, RestartError, raising
from unirender.protocol import ProtocolError, build_event
from unirender.protocol.images import parse_depth_format
from unirender.protocol.state import normalize_action
from unirender.simulator import (
    AI2THOR,
    BUILTIN,
    ActionDescription,
    Description,
    ObservationDescription,
    describe_placement,
)
from unirender.transport import PlayerHub, Transport, make_transport

if TYPE_CHECKING:
    from unirender.protocol.event import Event

# Unity quality names -> -screen-quality index (protocol.md 6.2); "DONOTUSE" (0) is rejected like 5.0.0 does.
QUALITY_SETTINGS = {
    "Very Low": 1,
    "Low": 2,
    "Medium": 3,
    "MediumCloseFitShadows": 4,
    "High": 5,
    "Very High": 6,
    "Ultra": 7,
    "High WebGL": 8,
}
# errorCodes that mean "this action was wrong", raised as ActionError (protocol.md 6.6).
ACTION_ERROR_CODES = frozenset({"InvalidAction", "MissingArguments", "AmbiguousAction", "InvalidArgument"})
UNITY_DEFAULT_PORT = 8200  # where a player without AI2THOR_* variables sends its WSGI requests (protocol.md 9.13)
PROCEDURAL_SCENE = "Procedural"  # ProcTHOR builds: a house dict is built in this scene with CreateHouse
# Python-side aliases 5.0.0 applies to Initialize (the old keys are kept too).
_INIT_ALIASES = {"renderClassImage": "renderSemanticSegmentation", "renderObjectImage": "renderInstanceSegmentation"}
_log_counter = itertools.count()


def default_log_dir() -> Path:
    """``$UNIRENDER_LOG_DIR`` or ``~/.unirender/log`` (player logs are kept after the session, like 5.0.0's)."""
    return Path(os.environ.get("UNIRENDER_LOG_DIR") or Path.home() / ".unirender" / "log")


def new_log_path(log_dir: str | os.PathLike | None, kind: str) -> str:
    """A fresh ``<kind>-<time>-<pid>-<n>.log`` under ``log_dir`` (default :func:`default_log_dir`), which is
    created; one per launched player, whichever protocol it speaks."""
    root = Path(log_dir) if log_dir is not None else default_log_dir()
    root.mkdir(parents=True, exist_ok=True)
    return str(root / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_log_counter)}.log")


def camera_frames(event) -> dict:
    """The colour camera views of an AI2-THOR event, keyed as ``describe()`` names them (``frame``, and
    ``third_party_camera_frames`` stacked ``(N, H, W, 3)``); the registry's reader for this family."""
    frames = {}
    if event.frame is not None:
        frames["frame"] = event.frame
    if event.third_party_camera_frames:
        frames["third_party_camera_frames"] = np.stack(event.third_party_camera_frames)
    return frames


class Controller(RestartWindow):
    """One player process and its transport. See the module doc and ``docs/internals.md``.

    A :class:`unirender.simulator.Simulator` of the ``ai2thor`` family (``describe()``)."""

    family = AI2THOR
    build_digest: str | None = None  # the build store's digest when the build was named by reference
    stop_grace_s = 2.0  # SIGTERM, then SIGKILL after this long

    def __init__(
        self,
        executable: str | os.PathLike = BUILTIN,
        width: int = 300,
        height: int = 300,
        server: str = "fifo",
        quality: str = "Ultra",
        scene: str | dict | None = None,
        x_display: str | None = None,
        platform=None,
        headless: bool = False,
        gpu_device: int | str | None = None,
        server_timeout: float | None = 100.0,
        server_start_timeout: float | None = 300.0,
        max_restarts: int = 3,
        depth_format: str = "Meters",
        player_hub: PlayerHub | None = None,
        log_dir: str | os.PathLike | None = None,
        start_unity: bool = True,
        host: str = "127.0.0.1",
        port: int | None = None,
        wsgi_fast_path: bool = True,
        build: str | None = None,
        commit_id: str | None = None,
        local_executable_path: str | os.PathLike | None = None,
        **initialize_params,
    ):
        """``executable``: a path, ``"builtin"``, or a build-store reference; ``build``: a reference
        (``"ai2thor:<commit>"``, ``"name:tag"``, ``"sha256:<digest>"``); ``commit_id`` and
        ``local_executable_path``: AI2-THOR's own keywords (docs/builds.md)."""
        if quality not in QUALITY_SETTINGS:
            raise ValueError(f"quality must be one of {list(QUALITY_SETTINGS)}, got {quality!r}")
        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if str(server).lower() not in ("fifo", "wsgi"):
            raise ValueError(f"server must be 'fifo' or 'wsgi', got {server!r}")
        if player_hub is not None and str(server).lower() != "wsgi":
            raise ValueError("player_hub only applies to server='wsgi'")
        self.depth_format = parse_depth_format(depth_format)
        # start_unity=False: a player started by someone else (the Unity Editor in play mode, a build run by
        # hand) connects to us. Without AI2THOR_* variables Unity speaks WSGI to 127.0.0.1:8200 (protocol.md 9.13).
        self.start_unity = bool(start_unity)
        self.host, self.port = host, (port if port is not None else (0 if start_unity else UNITY_DEFAULT_PORT))
        if not self.start_unity:
            if str(server).lower() != "wsgi":
                raise ValueError("start_unity=False needs server='wsgi': a player started elsewhere speaks HTTP")
            if player_hub is not None:
                raise ValueError("start_unity=False listens on its own port (host=, port=); not with player_hub")
            executable = BUILTIN  # nothing is launched
        else:
            resolved = controller_build(executable, build=build, commit_id=commit_id,
                                        local_executable_path=local_executable_path, platform=platform)  # fmt: skip
            if is_webgl(resolved, platform):
                # The bridge is built on the webgl family's controller, a layer above this one; a Controller that
                # turned into it would not be a Controller (no transport, begin_step, server_type). docs/webgl.md
                raise ValueError(
                    f"{resolved.executable} is an AI2-THOR WebGL build (or platform WebGL was asked for): a Controller "
                    "launches a player process, and a WebGL build runs in headless Chromium through the AI2-THOR WebGL "
                    "bridge. Start it with unirender.webgl.ai2thor.launch(...) (the same keyword arguments as "
                    "Controller) or as a session, spec job, service session or UnityEnv, whose AI2-THOR launcher picks "
                    "the bridge (docs/webgl.md, 'AI2-THOR WebGL builds')"
                )
            executable = resolved.executable
            self.build_digest = resolved.stored.digest if resolved.stored is not None else None
            # Held while this controller runs players of the build (released by stop()): the store evicts no
            # leased build, and the lease records its use time (docs/builds.md, "A bounded store").
            self._build_lease = resolved.lease()
        self.builtin = str(executable) == BUILTIN
        self.executable = BUILTIN if self.builtin else os.fspath(executable)
        if self.start_unity and not self.builtin and not os.access(self.executable, os.X_OK):
            raise FileNotFoundError(f"player executable {self.executable!r} does not exist or is not executable")
        self.width, self.height, self.quality = width, height, quality
        self.server = str(server).lower()
        self.scene = scene
        self.x_display, self.platform_choice, self.headless, self.gpu_device = x_display, platform, headless, gpu_device
        self.server_timeout, self.server_start_timeout = server_timeout, server_start_timeout
        self.max_restarts = max_restarts
        self.player_hub = player_hub
        # A private WSGI player (no shared hub) is served from this controller's thread (transport.direct);
        # False serves it on a private waitress PlayerHub instead (same wire behaviour, one thread hand-off more).
        self.wsgi_fast_path = bool(wsgi_fast_path)
        self.initialization_parameters = dict(initialize_params)
        self.camera_near_plane, self.camera_far_plane = 0.1, 20.0
        self.last_event = None
        self.transport: Transport | None = None
        self.process: ManagedProcess | None = None
        self.resolution = None
        self.restarts = RestartBudget(max_restarts)  # max_restarts counts restarts within a rolling 600 s
        self._scenes_in_build: list[str] | None = None
        self._stopped = False
        self.log_path = new_log_path(log_dir, "player")
        try:
            self.resolution = self._resolve_platform() if self.start_unity else None
            self._launch()
            self._start_sequence()
        except BaseException:
            self.stop()
            raise

    # -- public API -------------------------------------------------------------------------------------------
    @property
    def server_type(self) -> str:
        return "FIFO" if self.server == "fifo" else "WSGI"

    def step(self, action=None, **kwargs):
        """Send one action and return its Event: ``step("MoveAhead")``, ``step(action="MoveAhead", ...)`` or
        ``step({"action": "MoveAhead", ...})``. ``raise_for_failure=True`` raises ActionError on any failure."""
        return self.begin_step(action, **kwargs)()

    def begin_step(self, action=None, **kwargs) -> Callable[[], Event]:
        """:meth:`step` in two halves: the action is sent now, and the function returned receives its event
        (returning or raising what ``step`` would). Call it before anything else on this Controller. One thread
        can so send several players their actions before it waits for any (the service's batched steps), so
        that every player renders at once and no thread has to wake up for each."""
        command, raise_for_failure = self._step_command(action, kwargs)
        try:
            self._guarded(lambda: self.transport.send(command))
        except Exception as exc:  # noqa: BLE001 - raised by the second half, as step() would raise it
            return raising(exc)
        return lambda: self._guarded(lambda: self._received(command, raise_for_failure))

    def _step_command(self, action, kwargs) -> tuple[dict, bool]:
        """The AI2-THOR family's action normalisation (``normalize_action``: the one the remote session shares),
        done here once for every backend; a copy, as the command is changed below."""
        try:
            command = normalize_action(action, kwargs)
        except TypeError:
            raise ValueError(f"step() needs an action name, got {action!r}") from None
        if command is action:
            command = dict(command)
        if not isinstance(command.get("action"), str):
            raise ValueError(f"step() needs an action name, got {command.get('action')!r}")
        raise_for_failure = bool(command.pop("raise_for_failure", False))
        if self.headless:
            command["renderImage"] = False  # what 5.0.0 does for every action when headless
        return command, raise_for_failure

    def reset(self, scene: str | dict | None = None, **initialize_params):
        """Load ``scene`` (default: the current one) and re-send Initialize with the merged parameters.

        ``scene`` may be a ProcTHOR house (a dict): the player resets to ``Procedural`` and, after Initialize,
        builds it with ``CreateHouse``, as AI2-THOR does.
        """
        self.initialization_parameters.update(initialize_params)
        return self._guarded(lambda: self._reset(scene if scene is not None else self.scene))

    def stop(self) -> None:
        """End the player (SIGTERM, then SIGKILL), reap it, close pipes/sockets, remove temp dirs. Idempotent."""
        self._stopped = True
        self._shutdown_player()
        if self.resolution is not None:
            self.resolution.release()
            self.resolution = None
        build_lease, self._build_lease = getattr(self, "_build_lease", None), None
        if build_lease is not None:
            build_lease.release()

    def describe(self) -> Description:
        """Where the player runs and what its events carry (the frames of the last event: its modalities and
        cameras as they came, shapes as ``Event`` hands them out). Not for the step path: it decodes them."""
        observations = []
        event = self.last_event
        if event is not None:
            for key, array in event.frames().items():
                camera = key in ("frame", "third_party_camera_frames")
                observations.append(ObservationDescription(key, "image", tuple(array.shape), str(array.dtype),
                                                           camera=camera))  # fmt: skip
        names: tuple[str, ...] = ()
        if self.builtin:
            from unirender.player.actions import (
                ACTIONS,  # the reference player's table (a build's is unknown)
            )

            names = tuple(sorted(ACTIONS))
        build = None
        if event is not None:
            build = event.metadata.get("buildVersion") or event.metadata.get("unityVersion")
        return Description(
            family=self.family,
            actions=ActionDescription("named", names=names),
            observations=tuple(observations),
            server_type=self.server_type,
            build_version=str(build) if build else None,
            **describe_placement(self),
        )

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:  # last resort: a forgotten controller must not leave a player or a temp dir
        try:
            if not self._stopped:
                self.stop()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else (self.process.describe() if self.process else "not started")
        return f"<Controller {self.executable} {self.server_type} {self.width}x{self.height}: {state}>"

    # -- launching ----------------------------------------------------------------------------------------------
    def _resolve_platform(self):
        from unirender.platforms import PlatformRequest, resolve

        request = PlatformRequest.of(self, headless=self.headless, builtin=self.builtin)
        return resolve(request, platform=self.platform_choice or "auto")

    def unity_args(self) -> list[str]:
        """protocol.md 6.2: the size/quality flags (or ``-batchmode -nographics`` headless), then the platform's args
        (``-force-device-index N``)."""
        if self.headless:
            args = ["-batchmode", "-nographics"]
        else:
            args = ["-screen-fullscreen", "0", "-screen-quality", str(QUALITY_SETTINGS[self.quality]),
                    "-screen-width", str(self.width), "-screen-height", str(self.height)]  # fmt: skip
        return args + list(self.resolution.args if self.resolution else [])

    def _command(self) -> list[str]:
        if self.builtin:
            return [sys.executable, "-m", "unirender.player", *self.unity_args()]
        return [self.executable, *self.unity_args()]

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.resolution.env)
        env.update(self.transport.player_env())
        env["AI2THOR_SERVER_SIDE_SCREENSHOT"] = "False" if self.headless else "True"
        if self.builtin:
            env["UNIRENDER_PLAYER_BACKEND"] = self.resolution.backend or ""
        return env

    def _launch(self) -> None:
        """A fresh transport and player process; then wait for the hello event (protocol.md 6.4 steps 2-5)."""
        # A player we do not launch was given no token (it sends an empty one); an action the player does not
        # read is a hang too, so it is bounded like an answer.
        self.transport = make_transport(self.server, hub=self.player_hub, host=self.host, port=self.port,
                                        accept_any_token=not self.start_unity, send_timeout=self.server_timeout,
                                        direct=self.wsgi_fast_path)
        if not self.start_unity:
            self.transport.start()
            self._set_event(self.transport.receive(self.server_start_timeout))
            return
        self.transport.start()
        name = "unirender-player (builtin)" if self.builtin else Path(self.executable).name
        # Out of the terminal's foreground group: a Ctrl-C is the caller's to handle (a job stops its players
        # as a normal stop); a player that saw it too would exit 130 and look like a crash.
        self.process = ManagedProcess(
            self._command(),
            env=self._environment(),
            log_path=self.log_path,
            name=name,
            new_session=in_terminal_foreground(),
        )
        self.transport.attach(self.process)
        self._set_event(self.transport.receive(self.server_start_timeout))

    def _start_sequence(self) -> None:
        """protocol.md 6.4: fix the size (CloudRendering ignores -screen-*), then load the scene and Initialize."""
        self._fix_screen()
        if self.scene is not None:
            self._reset(self.scene)
        elif self.initialization_parameters:
            self._initialize()

    def _fix_screen(self) -> None:
        peek = self.last_event.peek_metadata
        if (peek("screenWidth"), peek("screenHeight")) != (self.width, self.height):
            self._exchange({"action": "ChangeResolution", "x": self.width, "y": self.height}, True)
        if self.resolution is not None and self.resolution.platform.ignores_screen_flags:  # CloudRendering-like
            self._exchange({"action": "ChangeQuality", "quality": self.quality}, True)

    def _reset(self, scene: str | dict | None):
        scenes = self._scenes()
        house = None
        if isinstance(scene, dict):  # a ProcTHOR house: Reset to "Procedural", then CreateHouse (protocol.md 6.4)
            house, scene = scene, PROCEDURAL_SCENE
            if scenes is not None and PROCEDURAL_SCENE not in scenes:
                raise ValueError(
                    f"a house needs a ProcTHOR build (scene {PROCEDURAL_SCENE!r}); this build has {scenes}"
                )
        if scene is None:
            if not scenes:
                raise ValueError("no scene given and the player does not list its scenes (GetScenesInBuild)")
            scene = sorted(scenes)[0]
        if not isinstance(scene, str):
            raise TypeError(f"scene must be a scene name or a ProcTHOR house dict, got {type(scene).__name__}")
        if scenes is not None and scene not in scenes and f"{scene}_physics" in scenes:
            scene = f"{scene}_physics"  # FloorPlanN -> FloorPlanN_physics, as 5.0.0 does
        # A scene file (the reference player loads scenes by path) is not in the build's list by nature.
        is_path = "/" in scene or scene.endswith((".yaml", ".yml", ".json"))
        if scenes is not None and scene not in scenes and not is_path:
            raise ValueError(f"scene {scene!r} is not in the build; it has {scenes}")
        self._exchange({"action": "Reset", "sceneName": scene, "sequenceId": 0}, True)
        self.scene = scene
        self._fix_screen()
        event = self._initialize()
        if house is not None:
            event = self._exchange({"action": "CreateHouse", "house": house}, True)
            self.scene = house  # reset() without a scene (and a restart) builds the same house again
        return event

    def _scenes(self) -> list[str] | None:
        if self._scenes_in_build is None:
            try:
                event = self._exchange({"action": "GetScenesInBuild"}, False)
            except ActionError:  # an old build without the action: unknown list, as 5.0.0 treats it
                return None
            scenes = event.metadata.get("actionReturn")
            self._scenes_in_build = list(scenes) if isinstance(scenes, list) else None
        return self._scenes_in_build

    def _initialize(self):
        params = dict(self.initialization_parameters)
        for old, new in _INIT_ALIASES.items():
            if old in params:
                params.setdefault(new, params[old])
        event = self._exchange({"action": "Initialize", **params}, True)
        planes = event.metadata.get("actionReturn")
        if isinstance(planes, dict) and "cameraNearPlane" in planes and "cameraFarPlane" in planes:
            self.camera_near_plane = float(planes["cameraNearPlane"])
            self.camera_far_plane = float(planes["cameraFarPlane"])
        return event

    @property
    def last_action(self) -> dict | None:
        """The action last sent to the player, as sent (kept by the transport, which prepares it)."""
        return self.transport.last_action if self.transport is not None else None

    # -- the hot path -------------------------------------------------------------------------------------------
    def _exchange(self, command: dict, raise_for_failure: bool):
        self.transport.send(command)
        return self._received(command, raise_for_failure)

    def _received(self, command: dict, raise_for_failure: bool):
        """The event of ``command``, which was sent: its answer received, checked for an action error."""
        event = self._set_event(self.transport.receive(self.server_timeout))
        peek = event.peek_metadata  # step keys only: the metadata document stays undecoded until someone reads it
        if not peek("lastActionSuccess", True):
            code = peek("errorCode") or ""
            if code in ACTION_ERROR_CODES or raise_for_failure:
                message = peek("errorMessage") or f"{command.get('action')} failed"
                raise ActionError(message, error_code=code or None, action=self.last_action)
        return event

    def _set_event(self, payload):
        self.last_event = build_event(
            payload,
            depth_format=self.depth_format,
            camera_near_plane=self.camera_near_plane,
            camera_far_plane=self.camera_far_plane,
        )
        return self.last_event

    # -- failure handling ---------------------------------------------------------------------------------------
    # Crash supervision (RestartWindow._supervised): a hung player, garbage on the wire, a wrong token: unusable.
    _crash_error, _restarted_error = PlayerCrashedError, RestartError
    _unusable_errors, _noted_errors = (PlayerError, ProtocolError), (ProtocolError,)

    def _guarded(self, operation):
        """Run one exchange; on a crash restart (bounded) and raise RestartError; on a hang or garbage, stop."""
        if self._stopped:
            raise PlayerError("this Controller is stopped; create a new one", log_path=self.log_path)
        return self._supervised(operation)

    def _relaunch(self) -> None:
        self._launch()
        self._restore()

    def _end(self) -> None:
        self.stop()

    def _restarted_message(self, crash: BaseException) -> str:
        return (f"the player crashed and was restarted ({len(self.restarts)} of max {self.max_restarts} within "
                f"{self.restart_window_s:g} s); the episode is lost, start it again. Cause: {crash}")  # fmt: skip

    def _restore(self) -> None:
        """After a relaunch: same size, same scene, same Initialize parameters (protocol.md 6.7)."""
        self._scenes_in_build = None
        self._fix_screen()
        if self.scene is not None:
            self._reset(self.scene)
        elif self.initialization_parameters:
            self._initialize()

    def _shutdown_player(self) -> None:
        process, transport = self.process, self.transport
        if process is not None:
            process.terminate(self.stop_grace_s)
        if transport is not None:
            transport.stop()
        self.transport = None

