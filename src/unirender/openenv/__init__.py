"""OpenEnv servers for unirender environments (the ``openenv`` extra): ``unirender openenv serve SPEC`` serves the
declared environment (AI2-THOR, ML-Agents or a WebGL build; any session backend) to OpenEnv clients over OpenEnv's own
``create_app``, one player per WebSocket session. See docs/openenv.md."""

from unirender.openenv.models import UnirenderAction, UnirenderObservation, UnirenderState

__all__ = ["UnirenderAction", "UnirenderObservation", "UnirenderState"]
