"""``python -m metacan_pipeline_tests.stub_teacher``: serve the stub teacher (options: ``--help``)."""

from metacan_pipeline_tests.stub_teacher.process import main

main()
