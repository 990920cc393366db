"""MkDocs hooks: the docstrings' reStructuredText roles shown as plain code, and pages that load nothing
from the network (``site/`` is read offline)."""

import re

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):(?=<code>)")
# Scripts that would load from a CDN: the offline plugin's search shim (search then works when the site is
# served, e.g. `python -m http.server -d site`), and the notebook template's empty MathJax tag and Mermaid
# loader (no tutorial uses either).
_REMOTE = [
    re.compile(r'<script src="https?://[^"]*">\s*</script>'),
    re.compile(r'<script src="">\s*</script>'),
    re.compile(r'<script type="module">(?:(?!</script>).)*?https://cdnjs\.cloudflare\.com(?:(?!</script>).)*</script>', re.S),
]


def on_page_content(html, page, config, files):
    """``:func:<code>x</code>`` (a role left over after Markdown) becomes ``<code>x</code>``."""
    return _ROLE.sub("", html)


def on_post_page(output, page, config):
    """The page without the script tags that would reach the network."""
    for pattern in _REMOTE:
        output = pattern.sub("", output)
    return output


def on_post_template(output_content, template_name, config):
    """The same for the static templates (404.html)."""
    return on_post_page(output_content, None, config)
