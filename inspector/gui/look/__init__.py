"""What every view shares in how it looks: outcome colours, the banner's colours, counted nouns, row
copy of tables, windows and dialogs kept inside their screen."""
