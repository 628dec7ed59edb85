"""The reference player as a Unity ML-Agents game: started with ``--mlagents-port N`` (as mlagents-envs starts a
build) it connects as the gRPC client and plays a built-in arena (``game.py``), rendered by the player's GL or
Vulkan renderer. ``launch.py`` reads the command line, ``client.py`` speaks the communicator."""
