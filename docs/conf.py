"""Sphinx configuration of the documentation site; its pages are the notebooks in nbs/, processed by
tools/make_docs.py (run `make docs`, not sphinx-build directly)."""
import configparser
from pathlib import Path

_cfg = configparser.ConfigParser(delimiters=['='])
_cfg.read(Path(__file__).resolve().parent.parent/'settings.ini', encoding='utf-8')
_s = _cfg['DEFAULT']

project = _s['title']
author = _s['author']
copyright = _s['copyright']
release = version = _s['version']

extensions = ['myst_nb']
root_doc = 'index'
nb_execution_mode = 'off'          # never run a notebook here: they start clusters; show_doc is rendered beforehand
nb_merge_streams = True
myst_heading_anchors = 4           # GitHub-style heading anchors, so `09_guide.ipynb#the-dashboard` resolves
myst_enable_extensions = ['colon_fence']
suppress_warnings = ['myst.header']  # show_doc's ### headings may follow a # title directly
exclude_patterns = ['_build', '**.ipynb_checkpoints']

html_theme = 'furo'
html_title = _s['title']
html_static_path = []
html_copy_source = False
html_show_sourcelink = False
