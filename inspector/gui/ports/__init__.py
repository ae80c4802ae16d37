"""What the main window lends its helpers: small typed handles (``handles``), never the window itself."""
