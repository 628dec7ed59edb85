"""The reference player: a separate process that renders declarative scenes headlessly and speaks the Unity
side of the AI2-THOR protocol (launch contract of protocol.md 6.2/6.3). Run it as ``unirender-player`` or
``python -m unirender.player``; normally ``Controller(executable="builtin")`` launches it.

Modules: ``scene`` (scene files), ``world`` (state, collisions), ``actions`` (handlers), ``metadata``,
``encode`` (wire bytes, ``decode_flow``), ``session`` (one player's state + renderer), ``launch`` (argv/env),
``channel`` (FIFO/WSGI I/O), ``main`` (entry point), ``render`` (GL/Vulkan back-ends).
"""
