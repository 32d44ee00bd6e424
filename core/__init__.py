"""What every other package builds on, importing none of them: the error hierarchy and its table.

``core`` sits below ``engines``, ``router``, ``serve_app``, ``cluster``, ``bench`` and ``sim`` so that each can
raise the project's errors without depending on another (``tests/test_import_graph.py`` checks it).
"""
