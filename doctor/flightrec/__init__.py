"""torch's flight recorder: read each rank's dump (safely) and name where the ranks diverged."""
