"""Static assets of the HTML session viewer (``forkpoint show SESSION --html FILE``).

They are Python strings (:mod:`forkpoint.viewer.assets`) so that they ship with the package without
any package-data configuration; :mod:`forkpoint.html` inlines them into the page.
"""
