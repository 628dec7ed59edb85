"""``unirender-player`` / ``python -m unirender.player``: the reference player's process entry point.

Launched exactly like a Unity build (see ``launch.py``). It speaks first (the hello event, sequenceId 0), then
loops: read the next action, run it, emit the result. It exits 0 when the controller closes the connection,
1 when rendering cannot start or the peer sends garbage, 2 for a bad command line or environment.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger("unirender.player")


def _serve(config) -> int:
    from unirender.player.channel import FifoChannel, WsgiChannel
    from unirender.player.session import PlayerSession
    from unirender.protocol.errors import ProtocolError

    session = PlayerSession(
        config.backend,
        config.width,
        config.height,
        quality=config.quality,
        render_images=config.screenshots,
        device_index=config.device_index,
        scene=config.scene,
    )
    if config.server_type == "FIFO":
        channel = FifoChannel(config.server_pipe, config.client_pipe)
    else:
        channel = WsgiChannel(config.host, config.port, config.token)
    try:
        emission = session.hello()
        if session.renderer is not None:
            info = session.renderer.info
            log.info("rendering with %s: %s (software=%s)", info.backend, info.renderer, info.software)
        while True:
            channel.emit(emission)
            action = channel.receive()
            if action is None:
                log.info("controller closed the connection; exiting")
                return 0
            emission = session.step(action, patches=channel.supports_patches)
    except ProtocolError as exc:
        log.error("protocol error from the controller: %s", exc)
        return 1
    except (BrokenPipeError, ConnectionError) as exc:
        log.info("connection to the controller lost (%s); exiting", exc)
        return 0
    finally:
        channel.close()
        session.close()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("UNIRENDER_PLAYER_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s unirender-player[%(process)d] %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    # SIGTERM (graceful stop from the controller) unwinds through the finally blocks above.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from unirender.errors import UnirenderError
    from unirender.player.launch import LaunchError, parse_launch

    args = sys.argv[1:] if argv is None else argv
    if "--mlagents-port" in args:  # launched as an ML-Agents game (e.g. by mlagents-envs): play that protocol
        from unirender.player.mlagents.client import main as mlagents_main

        return mlagents_main(args)
    try:
        config = parse_launch(args, dict(os.environ), executable=sys.argv[0])
    except LaunchError as exc:
        log.error("%s", exc)
        return 2
    log.info(
        "starting: backend=%s size=%dx%d quality=%s server=%s screenshots=%s",
        config.backend or "none (-nographics)", config.width, config.height, config.quality,
        config.server_type, config.screenshots,
    )  # fmt: skip
    try:
        return _serve(config)
    except UnirenderError as exc:  # PlatformError (no EGL device, no DISPLAY, no Vulkan), SceneError
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:  # a bug: leave the traceback in the player log for the controller's error message
        log.exception("the reference player failed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
