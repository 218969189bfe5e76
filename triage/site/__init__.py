"""The docs front end: the knowledge base as a static HTML site or as Markdown for MkDocs/Sphinx.

`builder.build` is the entry point; page content comes from `triage.render.document`.
"""
