"""The window's shell: the main window, its menus, run state and settings, and the layout that places every view."""
