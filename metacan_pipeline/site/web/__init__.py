"""The served site: the Starlette app, its API, pages, middleware, languages, exports and coding pages."""
