"""Serving: a setting's flags for vLLM / SGLang, heads exported in their layouts, the server
command, its metrics, and the serve-check."""
