"""What happened: fio output into the tidy frame, the one rule for a point's numbers, run directories read back."""
