"""One adapter per model wire API (Anthropic, OpenAI Responses and Chat Completions, Gemini,
Bedrock, OpenAI-compatible servers) over tether's own HTTP client, with retries and credentials.
"""
