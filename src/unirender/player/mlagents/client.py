"""The reference player's ML-Agents communicator: the Unity (gRPC client) side, as com.unity.ml-agents does it.

H1 (our init output) -> the trainer's init input (seed) -> H3 (a header-only message) -> the first input. Then
per input: side channels first (engine configuration, environment parameters), then the command (QUIT, RESET,
or STEP with the actions for the agents of our last output, in its order), then one Academy step whose output
(agent infos, stats) is the next request. Any status other than 200, or the trainer going away, ends the player.
Engine configuration honoured: screen resolution = the camera sensor's size, time scale = real-time pacing of the
0.02 s Academy step (Unity runs physics in real time times the scale).

Camera layout: a Unity game's is fixed by its package (2.x HWC, 3.x and 4.x CHW) and a trainer of the other
generation fails on the first image. The reference player stands in for the game a user has, so unless
``UNIRENDER_MLAGENTS_PACKAGE_VERSION`` fixes its package it announces 4.0.0 and then writes what the connecting
trainer's generation decodes, read from the trainer's ``package_version`` in the handshake: mlagents-envs 0.x
gets a 2.x game (HWC, dimension properties ``[2, 2, 1]``), 1.x and anything else a 4.x game (CHW, ``[1, 2, 2]``).
"""

from __future__ import annotations

import io
import logging
import time

import numpy as np

from unirender.player.mlagents import game as G
from unirender.player.mlagents.launch import MLAgentsLaunch
from unirender.protocol.mlagents.observations import packed_floats_message

log = logging.getLogger("unirender.player")

FIXED_DELTA_S = 0.02  # Unity's default fixed timestep; one decision per Academy step
# Our sends carry camera images; the trainer's replies are small, but allow what the trainer allows.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CONNECT_TIMEOUT_S = 30.0  # the first call only (a trainer that accepts but never answers); later calls have none


class TrainerGone(Exception):
    """The trainer closed the communicator or vanished: the player quits."""


class TrainerUnsupported(Exception):
    """The trainer lacks a capability the game needs (Unity throws a UnityAgentsException): the player fails."""


class MLAgentsPlayer:
    def __init__(self, config: MLAgentsLaunch):
        self.config = config
        self.chw = True  # settled by the handshake (_settle_layout)
        self.behaves_as = ""
        self.width, self.height = config.width, config.height
        self.time_scale = 1.0
        self.game = G.ReachTargetGame(config.agents, config.max_step)
        self.samplers: dict[str, tuple] = {}  # key -> (Sampler, rng)
        self.renderer = None
        self.brain_sent = False
        self.trainer_hybrid_actions = True  # the trainer's hybridActions capability (the handshake)
        self.order: list[int] = []  # agent ids of the non-done infos of our last output, in order
        self.pending_stats: list = []
        self._channel = None
        self._clock = None
        self._looks = None  # (light, target colour) of the scene the renderer holds

    # -- transport --------------------------------------------------------------------------------------------
    def run(self) -> int:
        import grpc

        from unirender.protocol.mlagents import communicator_objects_pb2 as pb
        from unirender.protocol.mlagents.versions import GRPC_METHOD

        self.pb = pb
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]  # fmt: skip
        self._channel = grpc.insecure_channel(f"localhost:{self.config.port}", options=options)
        exchange = self._channel.unary_unary(
            GRPC_METHOD, request_serializer=pb.UnityMessageProto.SerializeToString,
            response_deserializer=pb.UnityMessageProto.FromString,
        )  # fmt: skip
        try:
            try:
                # One try, as Unity makes: nobody listening = no trainer (the trainer always listens first).
                reply = exchange(self._init_output(), timeout=CONNECT_TIMEOUT_S)
            except grpc.RpcError as exc:
                log.error("couldn't connect to trainer on port %d (%s); quitting", self.config.port, exc.code())
                return 1
            self._check_ok(reply)
            trainer = reply.unity_input.rl_initialization_input
            self.game.seed(trainer.seed)
            self.trainer_hybrid_actions = trainer.capabilities.hybridActions
            self._settle_layout(trainer.package_version)
            log.info("connected to trainer: communication %s, package %s, seed %d; camera layout %s (%s)",
                     trainer.communication_version, trainer.package_version, trainer.seed,
                     "CHW" if self.chw else "HWC", self.behaves_as)  # fmt: skip
            request = self._header_only()
            while True:
                try:
                    reply = exchange(request)
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # Unity logs this one as an error
                        log.error("the trainer refused our message (%s); quitting", exc.details())
                    else:
                        log.info("trainer gone (%s); quitting", exc.code())
                    return 0
                self._check_ok(reply)
                request = self._apply(reply.unity_input.rl_input) if reply.HasField("unity_input") else None
                if request is None:
                    request = self._academy_step(None)
        except TrainerGone as why:
            log.info("%s; quitting", why)
            return 0
        except TrainerUnsupported as why:
            log.error("%s; quitting", why)
            return 1
        finally:
            self.close()

    def _settle_layout(self, trainer_package: str) -> None:
        """Fix the camera layout: the forced package's, else the one the trainer's generation decodes."""
        from unirender.player.mlagents.launch import DEFAULT_PACKAGE_VERSION, HWC_PACKAGE_VERSION
        from unirender.protocol.mlagents.versions import CHW, HWC, trainer_layout, unity_package_layout

        if self.config.package_version is not None:
            self.chw = unity_package_layout(self.config.package_version) == CHW
            self.behaves_as = f"package {self.config.package_version}, forced"
            return
        self.chw = trainer_layout(trainer_package) != HWC
        game = DEFAULT_PACKAGE_VERSION if self.chw else HWC_PACKAGE_VERSION
        self.behaves_as = f"a package {game} game, for mlagents-envs {trainer_package or '(no version)'}"

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None

    def _check_ok(self, reply) -> None:
        if reply.header.status != 200:
            raise TrainerGone(f"the trainer closed the communicator (status {reply.header.status})")

    # -- messages ---------------------------------------------------------------------------------------------
    def _header_only(self):
        message = self.pb.UnityMessageProto()
        message.header.status = 200
        return message

    def _init_output(self):
        from unirender.player.mlagents.launch import DEFAULT_PACKAGE_VERSION
        from unirender.protocol.mlagents.trainer import all_capabilities
        from unirender.protocol.mlagents.versions import COMMUNICATION_VERSION

        message = self._header_only()
        init = message.unity_output.rl_initialization_output
        init.name, init.communication_version = "AcademySingleton", COMMUNICATION_VERSION
        init.package_version = self.config.package_version or DEFAULT_PACKAGE_VERSION
        init.capabilities.CopyFrom(all_capabilities())
        return message

    def _apply(self, rl_input):
        """One trainer input; returns the next request (our output)."""
        self._side_channels(rl_input.side_channel)
        if rl_input.command == self.pb.QUIT:
            raise TrainerGone("the trainer sent QUIT")
        if rl_input.command == self.pb.RESET:
            self.order = []
            self.game.reset()
            self._draw_samplers()
            return self._academy_step(None)
        actions = {}
        if G.BEHAVIOR in rl_input.agent_actions:
            given = rl_input.agent_actions[G.BEHAVIOR].value
            if len(given) < len(self.order):
                log.error("trainer sent %d actions for %d agents", len(given), len(self.order))
            for agent_id, action in zip(self.order, given, strict=False):
                actions[agent_id] = (list(action.continuous_actions), list(action.discrete_actions))
        return self._academy_step(actions)

    def _side_channels(self, data: bytes) -> None:
        from unirender.protocol.mlagents import side_channels as sc

        for record in sc.decode_records(data):
            if record.channel_id == sc.ENGINE_CONFIGURATION:
                setting, values = sc.parse_engine_setting(record.payload)
                if setting == sc.EngineSetting.SCREEN_RESOLUTION and min(values) > 0:
                    self.width, self.height = values
                    if self.renderer is not None:
                        self.renderer.resize(*values)
                elif setting == sc.EngineSetting.TIME_SCALE:
                    self.time_scale = max(1.0, values[0])  # Unity clamps to >= 1
                log.info("engine configuration: %s %s", getattr(setting, "name", setting), values)
            elif record.channel_id == sc.ENVIRONMENT_PARAMETERS:
                key, value = sc.parse_environment_parameter(record.payload)
                if isinstance(value, sc.Sampler):
                    self.samplers[key] = (value, np.random.default_rng(value.seed))
                elif value is not None:
                    self.samplers.pop(key, None)
                    self.game.parameters[key] = value
                log.info("environment parameter %s = %s", key, value)
            elif record.channel_id == sc.TRAINING_ANALYTICS:
                log.debug("training analytics record (%d bytes)", len(record.payload))  # Unity only counts these
            else:
                log.warning("side channel data for unknown channel %s (%d bytes) kept unread",
                            record.channel_id, len(record.payload))  # fmt: skip

    def _draw_samplers(self) -> None:
        from unirender.protocol.mlagents.side_channels import SamplerType

        for key, (sampler, rng) in self.samplers.items():
            if sampler.kind == SamplerType.UNIFORM:
                value = rng.uniform(*sampler.values)
            elif sampler.kind == SamplerType.GAUSSIAN:
                value = rng.normal(*sampler.values)
            else:
                lengths = np.array([b - a for a, b in sampler.values])
                low, high = sampler.values[rng.choice(len(lengths), p=lengths / lengths.sum())]
                value = rng.uniform(low, high)
            self.game.parameters[key] = float(value)

    # -- one Academy step -------------------------------------------------------------------------------------
    def _pace(self) -> None:
        """Run the simulation at most ``time_scale`` times real time, as Unity's physics loop does."""
        now = time.monotonic()
        if self._clock is None or self._clock[1] != self.time_scale:
            self._clock = (now, self.time_scale, 0)
        start, scale, steps = self._clock
        ahead = start + (steps + 1) * FIXED_DELTA_S / scale - now
        if ahead > 0:
            time.sleep(ahead)
        elif ahead < -FIXED_DELTA_S / scale:  # behind (the trainer kept us waiting): no burst of catch-up steps
            start = now - (steps + 1) * FIXED_DELTA_S / scale
        self._clock = (start, scale, steps + 1)

    def _academy_step(self, actions):
        from unirender.protocol.mlagents import side_channels as sc

        self._pace()
        message = self._header_only()
        infos = message.unity_output.rl_output.agentInfos[G.BEHAVIOR].value
        if actions is None:  # after a reset (or an input without rl_input): observe only
            results = [G.AgentResult(agent) for agent in self.game.agents]
        else:
            results = self.game.step(actions)
        finished = [r for r in results if r.done]
        if finished:  # terminal observations are taken before anyone respawns
            frames = self._render_all([r.agent for r in finished])
            for r in finished:
                infos.append(self._info(r.agent, frames[r.agent.id], done=True, interrupted=r.interrupted))
                self.pending_stats += [sc.stats_message("Environment/Cumulative Reward", r.agent.episode_reward),
                                       sc.stats_message("Environment/Episode Length", r.agent.steps)]  # fmt: skip
            self.game.end_episodes(finished)
            self._draw_samplers()
        frames = self._render_all(self.game.agents)
        self.order = []
        for agent in self.game.agents:
            infos.append(self._info(agent, frames[agent.id]))
            self.order.append(agent.id)
            agent.reward = 0.0
        if not self.brain_sent:
            self._describe(message)
        message.unity_output.rl_output.side_channel = sc.encode_records(self.pending_stats)
        self.pending_stats = []
        return message

    def _describe(self, message) -> None:
        if not self.trainer_hybrid_actions:  # as com.unity.ml-agents' ActionSpec.CheckAllContinuousOrDiscrete
            raise TrainerUnsupported("the trainer does not support hybrid actions (capability hybridActions), "
                                     f"and {G.BEHAVIOR} has continuous and discrete actions")  # fmt: skip
        brain = message.unity_output.rl_initialization_output.brain_parameters.add()
        brain.brain_name, brain.is_training = G.BEHAVIOR, True
        brain.action_spec.num_continuous_actions = 2
        brain.action_spec.num_discrete_actions = len(G.DISCRETE_BRANCHES)
        brain.action_spec.discrete_branch_sizes.extend(G.DISCRETE_BRANCHES)
        self.brain_sent = True

    def _info(self, agent, image, done: bool = False, interrupted: bool = False):
        pb = self.pb
        info = pb.AgentInfoProto(id=agent.id, reward=agent.reward, done=done, max_step_reached=interrupted)
        if not done:
            info.action_mask.extend(self.game.action_mask(agent))
        h, w = self.height, self.width
        if isinstance(image, bytes):
            camera = info.observations.add(compression_type=pb.PNG, compressed_data=image, name=G.CAMERA_SENSOR)
        else:  # uncompressed: floats 0..1 in the sensor's layout, as Unity's ObservationWriter writes them
            camera = info.observations.add(name=G.CAMERA_SENSOR)
            values = (image.transpose(2, 0, 1) if self.chw else image).astype(np.float32) / np.float32(255.0)
            camera.float_data.MergeFromString(packed_floats_message(values))
        camera.shape.extend([3, h, w] if self.chw else [h, w, 3])
        camera.dimension_properties.extend([1, 2, 2] if self.chw else [2, 2, 1])
        vector = info.observations.add(name=G.VECTOR_SENSOR)
        vector.shape.append(8)
        vector.dimension_properties.append(1)
        vector.float_data.data.extend(self.game.vector_observation(agent))
        return info

    # -- cameras ----------------------------------------------------------------------------------------------
    def _render_all(self, agents) -> dict[int, bytes | np.ndarray]:
        """Each agent's camera image: PNG bytes, or the uint8 pixels when the sensor is uncompressed."""
        encode = encode_png if self.config.compression == "png" else np.array
        if self.config.backend is None:  # -nographics: the sensor keeps its shape, the image is black
            black = encode(np.zeros((self.height, self.width, 3), np.uint8))
            return {agent.id: black for agent in agents}
        renderer = self._renderer()
        poses = [(a.x, a.z, a.yaw) for a in self.game.agents]
        looks = (self.game.parameters["light_intensity"], self.game.target_color())
        meshes, instances, *lighting = G.render_scene(poses, self.game.target, *looks)
        if looks != self._looks:  # lights or colours changed: a new scene; otherwise only poses move
            renderer.set_scene(meshes, instances, *lighting)
            self._looks = looks
        else:
            renderer.update_instances(instances)
        return {
            agent.id: encode(G.frame_from_render(renderer.render(G.agent_camera(agent.x, agent.z, agent.yaw),
                                                                     {"rgb"})["rgb"]))  # fmt: skip
            for agent in agents
        }

    def _renderer(self):
        if self.renderer is None:
            from unirender.player.render import create_renderer

            self.renderer = create_renderer(self.config.backend, self.width, self.height, self.config.device_index)
            self._looks = None
            info = self.renderer.info
            log.info("rendering with %s: %s (software=%s)", info.backend, info.renderer, info.software)
        elif (self.renderer.width, self.renderer.height) != (self.width, self.height):
            self.renderer.resize(self.width, self.height)
        return self.renderer


def encode_png(rgb: np.ndarray) -> bytes:
    """An RGB24 PNG, as Unity's ``EncodeToPNG`` of a camera sensor; fastest zlib level (the player's cost)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def main(argv: list[str]) -> int:
    """Entry point for a launch with ``--mlagents-port``: exit 0 when the trainer closes, 1 on failure, 2 on a
    bad command line."""
    from unirender.errors import UnirenderError
    from unirender.player.launch import LaunchError
    from unirender.player.mlagents.launch import parse_mlagents_launch

    try:
        config = parse_mlagents_launch(argv)
    except LaunchError as exc:
        log.error("%s", exc)
        return 2
    if config.log_file:  # Unity writes its player log there: so do we (stderr stays for early failures)
        root = logging.getLogger()
        handler = logging.FileHandler(config.log_file, mode="a")
        handler.setFormatter(root.handlers[0].formatter if root.handlers else None)
        for old in list(root.handlers):
            root.removeHandler(old)
        root.addHandler(handler)
    log.info("starting ML-Agents player: port=%d backend=%s camera=%dx%d agents=%d max_step=%d package=%s",
             config.port, config.backend or "none (-nographics)", config.width, config.height, config.agents,
             config.max_step, config.package_version or "follows the trainer")  # fmt: skip
    player = MLAgentsPlayer(config)
    try:
        return player.run()
    except UnirenderError as exc:
        log.error("%s", exc)
        return 1
    except Exception:
        log.exception("the ML-Agents player failed")
        return 1
    finally:
        player.close()
