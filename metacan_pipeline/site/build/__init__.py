"""Building a release database: its files and pointer, its tables, the FTS5 index, the year-language cube and the
statistics page's figures (the lowest layer of the site; nothing here imports ``query`` or ``web``)."""
