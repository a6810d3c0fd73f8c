from oomdoctor.cli import main

main()
