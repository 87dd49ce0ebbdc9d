"""Calling a teacher: the OpenAI-compatible client, the lanes that send a run's batches, the embedded llama.cpp
server, the archive of replies, run statistics and the step retry rule."""
