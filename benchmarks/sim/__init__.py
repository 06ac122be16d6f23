"""The simulator's own pages: its speed, its validation against the served engine, the CPU
hardware model and the synthetic acceptance fit."""
