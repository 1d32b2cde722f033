"""The LLM workflow: request → TL sketch → TL code through any OpenAI-compatible endpoint, every answer
checked by the language core and repaired from its diagnostics (see docs/llm.md).

    from translator.llm.workflow import generate, complete
    from translator.llm.settings import LlmSettings
"""
