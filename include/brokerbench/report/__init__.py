"""The run report: a self-contained HTML file and a plain-text summary for task logs."""

from .html import build_report, render_text_summary

__all__ = ["build_report", "render_text_summary"]
