"""A chat template given by the user instead of the model's (llama.cpp's ``--chat-template``,
``--chat-template-file``); kept apart from ``inspector.llama.vocab`` so the command line reads it without
loading llama.cpp."""

from __future__ import annotations


def override_chat_template(rt, text: str) -> None:
    """Give runtime ``rt`` the chat template ``text`` instead of its GGUF's (llama.cpp's ``--chat-template``,
    ``--chat-template-file``); a module-level function, so a ``RemoteRuntime`` runs it in its child with
    ``apply``. Raises ``ValueError`` for text that is not a Jinja template (llama.cpp's built-in template
    names such as ``chatml`` are not read here)."""
    problem = template_problem(text)
    if problem:
        raise ValueError(problem)
    rt.vocabulary.template_override = text


def template_problem(text: str) -> str:
    """Why ``text`` cannot be a chat template, in one line ("" when it can): it must be Jinja text."""
    if "{{" not in text and "{%" not in text:
        return (f"--chat-template: {text[:40]!r} is not a Jinja template (llama.cpp's built-in template names "
                "are not supported by spec-inspector; give the template's text or a file)")
    return ""
