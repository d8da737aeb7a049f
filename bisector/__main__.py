from bisector.cli import main_entry

main_entry()
