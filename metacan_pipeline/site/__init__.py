"""The served evidence browser: the release database (``build``), cohort queries over it (``query``), the ASGI app
(``web``)."""
