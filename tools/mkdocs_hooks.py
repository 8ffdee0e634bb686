"""mkdocs hook: render the Sphinx roles of pinn's docstrings (``:func:`load_ase```) as inline code.

The docstrings keep the roles (they read well in ``help()`` and in editors);
in the site the role prefix is dropped, so ``:func:`x``` shows as ``x``.
"""
import re

ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):(?=<code>)")


def on_page_content(html, **kwargs):
    return ROLE.sub("", html)
