"""MkDocs hook (mkdocs.yml ``hooks``): the docstrings' reStructuredText roles, which mkdocstrings renders as text
(``:func:`name``` -> ``:func:<code>name</code>``), shown as the code they name."""
import re

ROLE = re.compile(r":(?:attr|class|const|data|exc|func|meth|mod|obj):(<code>)")


def on_page_content(html: str, **_) -> str:
    return ROLE.sub(r"\1", html)
