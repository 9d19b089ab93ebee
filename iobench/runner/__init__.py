"""Doing it: the sweep that runs a plan point by point and saves each point as it ends."""
