"""The frame of Canada-linked works: routes, lexicon, pinned entity lists (SPEC section 2)."""
