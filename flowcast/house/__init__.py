"""House process, manor house, launcher/supervisor."""
