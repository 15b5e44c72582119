"""The live demo (``python -m demo``): draw on any frame of a video, ask, and interrupt the streamed answer.

``config.py`` (the typed config), ``video.py`` (the loaded video, its frames and the drawing, in the
visual-prompt styles of ``data_builders.visual_prompts``), ``session.py`` (the streamed answer, cut where
the user interrupts, the interruption entered from the key/value cache by ``models.ovi_simulation``),
``saving.py`` (a session as an OVIBench or V2P-Bench item, through the release writers), ``server.py`` (a
small standard-library HTTP server) and ``page.html`` (the page: a canvas, no library, no network).
"""
