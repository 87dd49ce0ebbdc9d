"""metacan_pipeline: maps Canadian meta-research from open bibliographic data (OpenAlex).

See docs/architecture.md for the asset graph and ../shared/docs/SPEC.md for the domain rules.
"""

__version__ = "0.1.0"
