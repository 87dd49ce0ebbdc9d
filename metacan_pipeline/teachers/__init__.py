"""LLM teachers: OpenAI-compatible client, embedded llama.cpp server, prompts, validation, label store."""
