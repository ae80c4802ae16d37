"""The window's Serve switch and Requests tab (issue 35): the loaded model served as a llama-server-compatible
endpoint (``inspector.serve``), every request listed, plotted and shown in every view like a run."""
