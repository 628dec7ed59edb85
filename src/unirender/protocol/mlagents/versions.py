"""Communication API version checks and the visual-observation layout of each package generation.

The communication version ("1.5.0") says which messages exist; it does not say how camera images are laid out:
com.unity.ml-agents 2.x (mlagents-envs <= 0.30) writes ``[H, W, C]``, 3.x and 4.x (mlagents-envs >= 1.0)
``[C, H, W]``, all announcing "1.5.0". The layout therefore follows the peer's ``package_version`` (a game's:
:func:`unity_package_layout`; a trainer's: :func:`trainer_layout`), and, per observation, the dimension properties
a camera-like sensor declares (:func:`dimension_layout`), which name the channel axis.
"""

from __future__ import annotations

import re

from unirender.protocol.mlagents.errors import VersionMismatchError

COMMUNICATION_VERSION = "1.5.0"
# The one gRPC method of the communicator: Unity (the client) calls it, the Python side serves it.
GRPC_SERVICE = "communicator_objects.UnityToExternalProto"
GRPC_METHOD = f"/{GRPC_SERVICE}/Exchange"
HWC, CHW = "HWC", "CHW"
LAYOUTS = (HWC, CHW)
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_LEADING_MAJOR = re.compile(r"^\s*(\d+)")


def parse_version(text: str) -> tuple[int, int, int] | None:
    match = _SEMVER.match(text.strip())
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def check_communication_version(theirs: str, *, ours: str = COMMUNICATION_VERSION, package_version: str = "") -> None:
    """ML-Agents' rule, the same on both sides: a major of 0 must match in major and minor, any other major must
    match in major only. Raises :class:`VersionMismatchError` naming both versions (never a bare ValueError)."""
    peer = f" (package {package_version})" if package_version else ""
    mine, other = parse_version(ours), parse_version(theirs)
    if mine is None:
        raise ValueError(f"our own communication version {ours!r} is not major.minor.patch")
    if other is None:
        raise VersionMismatchError(
            f"the peer's communication version {theirs!r}{peer} is not major.minor.patch; unirender speaks {ours}",
            ours=ours, theirs=theirs, package_version=package_version,
        )  # fmt: skip
    compatible = other[:2] == mine[:2] if other[0] == 0 or mine[0] == 0 else other[0] == mine[0]
    if not compatible:
        raise VersionMismatchError(
            f"incompatible ML-Agents communication versions: the peer speaks {theirs}{peer}, unirender speaks "
            f"{ours} (the major versions must match; for 0.x also the minor)",
            ours=ours, theirs=theirs, package_version=package_version,
        )  # fmt: skip


def _major(package_version: str) -> int | None:
    match = _LEADING_MAJOR.match(package_version or "")
    return int(match.group(1)) if match else None


def unity_package_layout(package_version: str) -> str:
    """The layout a com.unity.ml-agents package writes: 3.x and later CHW, earlier (or unknown) HWC."""
    major = _major(package_version)
    return CHW if major is not None and major >= 3 else HWC


def trainer_layout(package_version: str) -> str | None:
    """The layout an mlagents-envs version decodes: 1.x and later CHW, 0.x HWC; None when the version has no
    leading number (a custom trainer: the game keeps its own layout)."""
    major = _major(package_version)
    if major is None:
        return None
    return CHW if major >= 1 else HWC


# DimensionPropertyProto: NONE marks the channel axis of a visual sensor, TRANSLATIONAL_EQUIVARIANCE the two
# spatial ones (ObservationSpec.Visual in every package since 2.0).
_NONE, _TRANSLATIONAL = 1, 2
_DIMENSION_LAYOUTS = {(_TRANSLATIONAL, _TRANSLATIONAL, _NONE): HWC, (_NONE, _TRANSLATIONAL, _TRANSLATIONAL): CHW}


def dimension_layout(dimension_properties) -> str | None:
    """The layout a rank-3 observation's dimension properties name (``[2, 2, 1]`` HWC, ``[1, 2, 2]`` CHW), or None
    when they name none (empty, unspecified, or anything else a custom sensor declares)."""
    return _DIMENSION_LAYOUTS.get(tuple(int(d) for d in dimension_properties))


def check_layout(layout: str | None) -> str | None:
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS} or None (from the package version), got {layout!r}")
    return layout
