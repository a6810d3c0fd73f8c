from oomdoctor.entry import main

main()
