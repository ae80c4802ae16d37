"""What every view shares in how it looks: outcome colours, counted nouns, row copy of tables,
windows and dialogs kept inside their screen."""
