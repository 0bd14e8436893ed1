"""Agent memory (MemFS): a git repository of Markdown files per agent (`memfs.py`), and the
frontmatter those files carry (`blocks.py`)."""
