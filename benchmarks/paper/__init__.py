"""The paper's figures on the simulator (Figs. 8-12, 14, the seed's, the test set, the
ablation) and what they stand on: the kit and set-ups (kit), kept runs (runs), the
paper's values (values), the hardware and acceptance fits (hardware, calibrate,
acceptance)."""
