from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandProto(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP: _ClassVar[CommandProto]
    RESET: _ClassVar[CommandProto]
    QUIT: _ClassVar[CommandProto]

class CompressionTypeProto(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[CompressionTypeProto]
    PNG: _ClassVar[CompressionTypeProto]

class ObservationTypeProto(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEFAULT: _ClassVar[ObservationTypeProto]
    GOAL_SIGNAL: _ClassVar[ObservationTypeProto]

class SpaceTypeProto(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    discrete: _ClassVar[SpaceTypeProto]
    continuous: _ClassVar[SpaceTypeProto]
STEP: CommandProto
RESET: CommandProto
QUIT: CommandProto
NONE: CompressionTypeProto
PNG: CompressionTypeProto
DEFAULT: ObservationTypeProto
GOAL_SIGNAL: ObservationTypeProto
discrete: SpaceTypeProto
continuous: SpaceTypeProto

class HeaderProto(_message.Message):
    __slots__ = ("status", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class UnityMessageProto(_message.Message):
    __slots__ = ("header", "unity_output", "unity_input")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    UNITY_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    UNITY_INPUT_FIELD_NUMBER: _ClassVar[int]
    header: HeaderProto
    unity_output: UnityOutputProto
    unity_input: UnityInputProto
    def __init__(self, header: _Optional[_Union[HeaderProto, _Mapping]] = ..., unity_output: _Optional[_Union[UnityOutputProto, _Mapping]] = ..., unity_input: _Optional[_Union[UnityInputProto, _Mapping]] = ...) -> None: ...

class UnityOutputProto(_message.Message):
    __slots__ = ("rl_output", "rl_initialization_output")
    RL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RL_INITIALIZATION_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    rl_output: UnityRLOutputProto
    rl_initialization_output: UnityRLInitializationOutputProto
    def __init__(self, rl_output: _Optional[_Union[UnityRLOutputProto, _Mapping]] = ..., rl_initialization_output: _Optional[_Union[UnityRLInitializationOutputProto, _Mapping]] = ...) -> None: ...

class UnityInputProto(_message.Message):
    __slots__ = ("rl_input", "rl_initialization_input")
    RL_INPUT_FIELD_NUMBER: _ClassVar[int]
    RL_INITIALIZATION_INPUT_FIELD_NUMBER: _ClassVar[int]
    rl_input: UnityRLInputProto
    rl_initialization_input: UnityRLInitializationInputProto
    def __init__(self, rl_input: _Optional[_Union[UnityRLInputProto, _Mapping]] = ..., rl_initialization_input: _Optional[_Union[UnityRLInitializationInputProto, _Mapping]] = ...) -> None: ...

class UnityRLCapabilitiesProto(_message.Message):
    __slots__ = ("baseRLCapabilities", "concatenatedPngObservations", "compressedChannelMapping", "hybridActions", "trainingAnalytics", "variableLengthObservation", "multiAgentGroups")
    BASERLCAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CONCATENATEDPNGOBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSEDCHANNELMAPPING_FIELD_NUMBER: _ClassVar[int]
    HYBRIDACTIONS_FIELD_NUMBER: _ClassVar[int]
    TRAININGANALYTICS_FIELD_NUMBER: _ClassVar[int]
    VARIABLELENGTHOBSERVATION_FIELD_NUMBER: _ClassVar[int]
    MULTIAGENTGROUPS_FIELD_NUMBER: _ClassVar[int]
    baseRLCapabilities: bool
    concatenatedPngObservations: bool
    compressedChannelMapping: bool
    hybridActions: bool
    trainingAnalytics: bool
    variableLengthObservation: bool
    multiAgentGroups: bool
    def __init__(self, baseRLCapabilities: bool = ..., concatenatedPngObservations: bool = ..., compressedChannelMapping: bool = ..., hybridActions: bool = ..., trainingAnalytics: bool = ..., variableLengthObservation: bool = ..., multiAgentGroups: bool = ...) -> None: ...

class UnityRLInitializationOutputProto(_message.Message):
    __slots__ = ("name", "communication_version", "log_path", "brain_parameters", "package_version", "capabilities")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    BRAIN_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    communication_version: str
    log_path: str
    brain_parameters: _containers.RepeatedCompositeFieldContainer[BrainParametersProto]
    package_version: str
    capabilities: UnityRLCapabilitiesProto
    def __init__(self, name: _Optional[str] = ..., communication_version: _Optional[str] = ..., log_path: _Optional[str] = ..., brain_parameters: _Optional[_Iterable[_Union[BrainParametersProto, _Mapping]]] = ..., package_version: _Optional[str] = ..., capabilities: _Optional[_Union[UnityRLCapabilitiesProto, _Mapping]] = ...) -> None: ...

class UnityRLInitializationInputProto(_message.Message):
    __slots__ = ("seed", "communication_version", "package_version", "capabilities", "num_areas")
    SEED_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_VERSION_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    NUM_AREAS_FIELD_NUMBER: _ClassVar[int]
    seed: int
    communication_version: str
    package_version: str
    capabilities: UnityRLCapabilitiesProto
    num_areas: int
    def __init__(self, seed: _Optional[int] = ..., communication_version: _Optional[str] = ..., package_version: _Optional[str] = ..., capabilities: _Optional[_Union[UnityRLCapabilitiesProto, _Mapping]] = ..., num_areas: _Optional[int] = ...) -> None: ...

class UnityRLInputProto(_message.Message):
    __slots__ = ("agent_actions", "command", "side_channel")
    class ListAgentActionProto(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: _containers.RepeatedCompositeFieldContainer[AgentActionProto]
        def __init__(self, value: _Optional[_Iterable[_Union[AgentActionProto, _Mapping]]] = ...) -> None: ...
    class AgentActionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: UnityRLInputProto.ListAgentActionProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[UnityRLInputProto.ListAgentActionProto, _Mapping]] = ...) -> None: ...
    AGENT_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    SIDE_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    agent_actions: _containers.MessageMap[str, UnityRLInputProto.ListAgentActionProto]
    command: CommandProto
    side_channel: bytes
    def __init__(self, agent_actions: _Optional[_Mapping[str, UnityRLInputProto.ListAgentActionProto]] = ..., command: _Optional[_Union[CommandProto, str]] = ..., side_channel: _Optional[bytes] = ...) -> None: ...

class UnityRLOutputProto(_message.Message):
    __slots__ = ("agentInfos", "side_channel")
    class ListAgentInfoProto(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: _containers.RepeatedCompositeFieldContainer[AgentInfoProto]
        def __init__(self, value: _Optional[_Iterable[_Union[AgentInfoProto, _Mapping]]] = ...) -> None: ...
    class AgentInfosEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: UnityRLOutputProto.ListAgentInfoProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[UnityRLOutputProto.ListAgentInfoProto, _Mapping]] = ...) -> None: ...
    AGENTINFOS_FIELD_NUMBER: _ClassVar[int]
    SIDE_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    agentInfos: _containers.MessageMap[str, UnityRLOutputProto.ListAgentInfoProto]
    side_channel: bytes
    def __init__(self, agentInfos: _Optional[_Mapping[str, UnityRLOutputProto.ListAgentInfoProto]] = ..., side_channel: _Optional[bytes] = ...) -> None: ...

class AgentInfoProto(_message.Message):
    __slots__ = ("reward", "done", "max_step_reached", "id", "action_mask", "observations", "group_id", "group_reward")
    REWARD_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    MAX_STEP_REACHED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_MASK_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_REWARD_FIELD_NUMBER: _ClassVar[int]
    reward: float
    done: bool
    max_step_reached: bool
    id: int
    action_mask: _containers.RepeatedScalarFieldContainer[bool]
    observations: _containers.RepeatedCompositeFieldContainer[ObservationProto]
    group_id: int
    group_reward: float
    def __init__(self, reward: _Optional[float] = ..., done: bool = ..., max_step_reached: bool = ..., id: _Optional[int] = ..., action_mask: _Optional[_Iterable[bool]] = ..., observations: _Optional[_Iterable[_Union[ObservationProto, _Mapping]]] = ..., group_id: _Optional[int] = ..., group_reward: _Optional[float] = ...) -> None: ...

class AgentActionProto(_message.Message):
    __slots__ = ("vector_actions_deprecated", "value", "continuous_actions", "discrete_actions")
    VECTOR_ACTIONS_DEPRECATED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    vector_actions_deprecated: _containers.RepeatedScalarFieldContainer[float]
    value: float
    continuous_actions: _containers.RepeatedScalarFieldContainer[float]
    discrete_actions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, vector_actions_deprecated: _Optional[_Iterable[float]] = ..., value: _Optional[float] = ..., continuous_actions: _Optional[_Iterable[float]] = ..., discrete_actions: _Optional[_Iterable[int]] = ...) -> None: ...

class ObservationProto(_message.Message):
    __slots__ = ("shape", "compression_type", "compressed_data", "float_data", "compressed_channel_mapping", "dimension_properties", "observation_type", "name")
    class FloatData(_message.Message):
        __slots__ = ("data",)
        DATA_FIELD_NUMBER: _ClassVar[int]
        data: _containers.RepeatedScalarFieldContainer[float]
        def __init__(self, data: _Optional[_Iterable[float]] = ...) -> None: ...
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_DATA_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_CHANNEL_MAPPING_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    compression_type: CompressionTypeProto
    compressed_data: bytes
    float_data: ObservationProto.FloatData
    compressed_channel_mapping: _containers.RepeatedScalarFieldContainer[int]
    dimension_properties: _containers.RepeatedScalarFieldContainer[int]
    observation_type: ObservationTypeProto
    name: str
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., compression_type: _Optional[_Union[CompressionTypeProto, str]] = ..., compressed_data: _Optional[bytes] = ..., float_data: _Optional[_Union[ObservationProto.FloatData, _Mapping]] = ..., compressed_channel_mapping: _Optional[_Iterable[int]] = ..., dimension_properties: _Optional[_Iterable[int]] = ..., observation_type: _Optional[_Union[ObservationTypeProto, str]] = ..., name: _Optional[str] = ...) -> None: ...

class ActionSpecProto(_message.Message):
    __slots__ = ("num_continuous_actions", "num_discrete_actions", "discrete_branch_sizes", "action_descriptions")
    NUM_CONTINUOUS_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_DISCRETE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_BRANCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    ACTION_DESCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    num_continuous_actions: int
    num_discrete_actions: int
    discrete_branch_sizes: _containers.RepeatedScalarFieldContainer[int]
    action_descriptions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, num_continuous_actions: _Optional[int] = ..., num_discrete_actions: _Optional[int] = ..., discrete_branch_sizes: _Optional[_Iterable[int]] = ..., action_descriptions: _Optional[_Iterable[str]] = ...) -> None: ...

class BrainParametersProto(_message.Message):
    __slots__ = ("vector_action_size_deprecated", "vector_action_descriptions_deprecated", "vector_action_space_type_deprecated", "brain_name", "is_training", "action_spec")
    VECTOR_ACTION_SIZE_DEPRECATED_FIELD_NUMBER: _ClassVar[int]
    VECTOR_ACTION_DESCRIPTIONS_DEPRECATED_FIELD_NUMBER: _ClassVar[int]
    VECTOR_ACTION_SPACE_TYPE_DEPRECATED_FIELD_NUMBER: _ClassVar[int]
    BRAIN_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_TRAINING_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPEC_FIELD_NUMBER: _ClassVar[int]
    vector_action_size_deprecated: _containers.RepeatedScalarFieldContainer[int]
    vector_action_descriptions_deprecated: _containers.RepeatedScalarFieldContainer[str]
    vector_action_space_type_deprecated: SpaceTypeProto
    brain_name: str
    is_training: bool
    action_spec: ActionSpecProto
    def __init__(self, vector_action_size_deprecated: _Optional[_Iterable[int]] = ..., vector_action_descriptions_deprecated: _Optional[_Iterable[str]] = ..., vector_action_space_type_deprecated: _Optional[_Union[SpaceTypeProto, str]] = ..., brain_name: _Optional[str] = ..., is_training: bool = ..., action_spec: _Optional[_Union[ActionSpecProto, _Mapping]] = ...) -> None: ...

class AgentInfoActionPairProto(_message.Message):
    __slots__ = ("agent_info", "action_info")
    AGENT_INFO_FIELD_NUMBER: _ClassVar[int]
    ACTION_INFO_FIELD_NUMBER: _ClassVar[int]
    agent_info: AgentInfoProto
    action_info: AgentActionProto
    def __init__(self, agent_info: _Optional[_Union[AgentInfoProto, _Mapping]] = ..., action_info: _Optional[_Union[AgentActionProto, _Mapping]] = ...) -> None: ...

class DemonstrationMetaProto(_message.Message):
    __slots__ = ("api_version", "demonstration_name", "number_steps", "number_episodes", "mean_reward")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEMONSTRATION_NAME_FIELD_NUMBER: _ClassVar[int]
    NUMBER_STEPS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_EPISODES_FIELD_NUMBER: _ClassVar[int]
    MEAN_REWARD_FIELD_NUMBER: _ClassVar[int]
    api_version: int
    demonstration_name: str
    number_steps: int
    number_episodes: int
    mean_reward: float
    def __init__(self, api_version: _Optional[int] = ..., demonstration_name: _Optional[str] = ..., number_steps: _Optional[int] = ..., number_episodes: _Optional[int] = ..., mean_reward: _Optional[float] = ...) -> None: ...

class EngineConfigurationProto(_message.Message):
    __slots__ = ("width", "height", "quality_level", "time_scale", "target_frame_rate", "show_monitor")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    QUALITY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TIME_SCALE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FRAME_RATE_FIELD_NUMBER: _ClassVar[int]
    SHOW_MONITOR_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    quality_level: int
    time_scale: float
    target_frame_rate: int
    show_monitor: bool
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., quality_level: _Optional[int] = ..., time_scale: _Optional[float] = ..., target_frame_rate: _Optional[int] = ..., show_monitor: bool = ...) -> None: ...

class CustomResetParametersProto(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrainingEnvironmentInitialized(_message.Message):
    __slots__ = ("mlagents_version", "mlagents_envs_version", "python_version", "torch_version", "torch_device_type", "num_envs", "num_environment_parameters", "run_options")
    MLAGENTS_VERSION_FIELD_NUMBER: _ClassVar[int]
    MLAGENTS_ENVS_VERSION_FIELD_NUMBER: _ClassVar[int]
    PYTHON_VERSION_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    TORCH_DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVIRONMENT_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RUN_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    mlagents_version: str
    mlagents_envs_version: str
    python_version: str
    torch_version: str
    torch_device_type: str
    num_envs: int
    num_environment_parameters: int
    run_options: str
    def __init__(self, mlagents_version: _Optional[str] = ..., mlagents_envs_version: _Optional[str] = ..., python_version: _Optional[str] = ..., torch_version: _Optional[str] = ..., torch_device_type: _Optional[str] = ..., num_envs: _Optional[int] = ..., num_environment_parameters: _Optional[int] = ..., run_options: _Optional[str] = ...) -> None: ...

class TrainingBehaviorInitialized(_message.Message):
    __slots__ = ("behavior_name", "trainer_type", "extrinsic_reward_enabled", "gail_reward_enabled", "curiosity_reward_enabled", "rnd_reward_enabled", "behavioral_cloning_enabled", "recurrent_enabled", "visual_encoder", "num_network_layers", "num_network_hidden_units", "trainer_threaded", "self_play_enabled", "curriculum_enabled", "config")
    BEHAVIOR_NAME_FIELD_NUMBER: _ClassVar[int]
    TRAINER_TYPE_FIELD_NUMBER: _ClassVar[int]
    EXTRINSIC_REWARD_ENABLED_FIELD_NUMBER: _ClassVar[int]
    GAIL_REWARD_ENABLED_FIELD_NUMBER: _ClassVar[int]
    CURIOSITY_REWARD_ENABLED_FIELD_NUMBER: _ClassVar[int]
    RND_REWARD_ENABLED_FIELD_NUMBER: _ClassVar[int]
    BEHAVIORAL_CLONING_ENABLED_FIELD_NUMBER: _ClassVar[int]
    RECURRENT_ENABLED_FIELD_NUMBER: _ClassVar[int]
    VISUAL_ENCODER_FIELD_NUMBER: _ClassVar[int]
    NUM_NETWORK_LAYERS_FIELD_NUMBER: _ClassVar[int]
    NUM_NETWORK_HIDDEN_UNITS_FIELD_NUMBER: _ClassVar[int]
    TRAINER_THREADED_FIELD_NUMBER: _ClassVar[int]
    SELF_PLAY_ENABLED_FIELD_NUMBER: _ClassVar[int]
    CURRICULUM_ENABLED_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    behavior_name: str
    trainer_type: str
    extrinsic_reward_enabled: bool
    gail_reward_enabled: bool
    curiosity_reward_enabled: bool
    rnd_reward_enabled: bool
    behavioral_cloning_enabled: bool
    recurrent_enabled: bool
    visual_encoder: str
    num_network_layers: int
    num_network_hidden_units: int
    trainer_threaded: bool
    self_play_enabled: bool
    curriculum_enabled: bool
    config: str
    def __init__(self, behavior_name: _Optional[str] = ..., trainer_type: _Optional[str] = ..., extrinsic_reward_enabled: bool = ..., gail_reward_enabled: bool = ..., curiosity_reward_enabled: bool = ..., rnd_reward_enabled: bool = ..., behavioral_cloning_enabled: bool = ..., recurrent_enabled: bool = ..., visual_encoder: _Optional[str] = ..., num_network_layers: _Optional[int] = ..., num_network_hidden_units: _Optional[int] = ..., trainer_threaded: bool = ..., self_play_enabled: bool = ..., curriculum_enabled: bool = ..., config: _Optional[str] = ...) -> None: ...
