"""What will run: points with their placement, device settings and fio job files."""
